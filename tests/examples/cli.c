/* Every tool's and example's command line (tools/common/cli.h): --help on
 * stdout with exit status 0; an unknown option, a missing value or a bad
 * value refused by name with exit status 2, before any data is read,
 * anything is written or any agent starts. And aq-bench gemm's products. */
#include <criterion/criterion.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs a program of the build (beside this test's folder: examples/
 * train_fashion, bin/aq-bench) with args; its exit status, and its output
 * in out. */
static int run_program_to(const char *program, const char *args, const char *stderr_to, char *out, size_t size) {
  char exe[PATH_MAX] = "", cmd[PATH_MAX + 256];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  cr_assert(n > 0);
  exe[n] = '\0';
  snprintf(cmd, sizeof(cmd), "%s/../%s %s 2>%s", dirname(exe), program, args, stderr_to);
  FILE *p = popen(cmd, "r");
  cr_assert(p, "cannot run %s", cmd);
  size_t got = fread(out, 1, size - 1, p);
  out[got] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_program(const char *program, const char *args, char *out, size_t size) {
  return run_program_to(program, args, "&1", out, size);
}

static int run(const char *args, char *out, size_t size) {
  char all[512];
  snprintf(all, sizeof(all), "%s --out /nonexistent-aq-dir", args);
  return run_program("examples/train_fashion", all, out, size);
}

Test(train_fashion_cli, unknown_augment_and_schedule_values_are_refused_by_name) {
  char out[4096];
  cr_assert_eq(run("--augment mirror", out, sizeof(out)), 2, "%s", out);
  cr_assert(strstr(out, "--augment mirror: expected none or flip"), "%s", out);
  cr_assert_eq(run("--schedule linear", out, sizeof(out)), 2, "%s", out);
  cr_assert(strstr(out, "--schedule linear: expected cosine or constant"), "%s", out);
  cr_assert(access("/nonexistent-aq-dir", F_OK) != 0, "nothing was written");
}

Test(aq_bench_cli, gemm_products_it_cannot_read_are_refused_by_name) {
  char out[4096];
  const char *bad[] = {"--shapes 256x1024", "--shapes 256x1024x784:tc", "--shapes 0x4x4", "--sizes 1024,x"};
  for (int gpu = 0; gpu < 2; ++gpu)
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
      char args[128];
      snprintf(args, sizeof(args), "gemm --agent %s %s", gpu ? "gpu" : "cpu", bad[i]);
      cr_assert_eq(run_program("bin/aq-bench", args, out, sizeof(out)), 2, "%s: %s", args, out);
      cr_assert(strstr(out, "is not a size N or a shape MxNxK[:ta][:tb]"), "%s: %s", args, out);
      cr_assert(!strstr(out, "no GPU agent") && !strstr(out, "\"bench\""), "%s: refused before anything runs: %s",
                args, out);
    }
}

Test(aq_bench_cli, gemm_precision_it_does_not_know_is_refused_by_name) {
  char out[4096];
  cr_assert_eq(run_program("bin/aq-bench", "gemm --agent gpu --precision fast", out, sizeof(out)), 2, "%s", out);
  cr_assert(strstr(out, "--precision fast: expected default (3xTF32) or exact (FFMA)"), "%s", out);
  cr_assert(!strstr(out, "no GPU agent") && !strstr(out, "\"bench\""), "refused before anything runs: %s", out);
}

Test(aq_bench_cli, gemm_density_outside_0_1_is_refused_by_name) {
  const char *bad[] = {"0", "1.5", "-0.5", "half", "0.5x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    char out[4096], args[96], want[96];
    snprintf(args, sizeof(args), "gemm --shapes 64x64x64 --density %s", bad[i]);
    snprintf(want, sizeof(want), "--density %s: expected a fraction of A's values kept, in (0, 1]", bad[i]);
    cr_assert_eq(run_program("bin/aq-bench", args, out, sizeof(out)), 2, "%s: %s", args, out);
    cr_assert(strstr(out, want) && !strstr(out, "\"bench\""), "%s: refused before anything runs: %s", args, out);
  }
}

Test(aq_bench_cli, train_bucket_sizes_it_cannot_use_are_refused_by_name) {
  const char *bad[] = {"0", "x", "4194305"}, *want[] = {"expected a value in [1, 4194304]", "expected an integer",
                                                       "expected a value in [1, 4194304]"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    char out[4096], args[96];
    snprintf(args, sizeof(args), "train --ranks 2 --steps 1 --bucket-kb %s", bad[i]);
    cr_assert_eq(run_program("bin/aq-bench", args, out, sizeof(out)), 2, "%s: %s", args, out);
    cr_assert(strstr(out, "--bucket-kb") && strstr(out, want[i]), "%s: %s", args, out);
    cr_assert(!strstr(out, "\"bench\""), "%s: refused before anything runs: %s", args, out);
  }
}

/* Half of A zero: the CPU GEMM's sparse path (both layouts of A), checked
 * against OpenBLAS's C. */
Test(aq_bench_cli, gemm_sparse_a_matches_openblas) {
  char out[8192];
  cr_assert_eq(run_program("bin/aq-bench", "gemm --shapes 256x300x600:ta,200x256x300 --density 0.5 --reps 1", out,
                           sizeof(out)),
               0, "%s", out);
  int lines = 0;
  for (const char *at = strstr(out, "\"max_rel_diff\":"); at; at = strstr(at + 1, "\"max_rel_diff\":"), ++lines)
    cr_assert_lt(strtod(at + strlen("\"max_rel_diff\":"), NULL), 1e-5, "%s", out);
  cr_assert_eq(lines, 2, "%s", out);
  cr_assert(strstr(out, "\"density\":0.5"), "%s", out);
}

/* Products of any shape and transpose on a CPU agent, each checked against
 * OpenBLAS's C in the same run. */
Test(aq_bench_cli, gemm_shapes_run_against_openblas) {
  char out[8192];
  cr_assert_eq(run_program("bin/aq-bench", "gemm --shapes 67x45x33:ta,40x70x9:tb,5x6x7:ta:tb --reps 1", out, sizeof(out)),
               0, "%s", out);
  const char *want[] = {"\"m\":67,\"n\":45,\"k\":33,\"trans_a\":1,\"trans_b\":0",
                        "\"m\":40,\"n\":70,\"k\":9,\"trans_a\":0,\"trans_b\":1",
                        "\"m\":5,\"n\":6,\"k\":7,\"trans_a\":1,\"trans_b\":1"};
  for (size_t i = 0; i < 3; ++i) cr_assert(strstr(out, want[i]), "no line with %s: %s", want[i], out);
  /* Every aquila line carries its difference from OpenBLAS's C, and it is a rounding's. */
  int lines = 0;
  for (const char *at = strstr(out, "\"max_rel_diff\":"); at; at = strstr(at + 1, "\"max_rel_diff\":"), ++lines)
    cr_assert_lt(strtod(at + strlen("\"max_rel_diff\":"), NULL), 1e-5, "%s", out);
  cr_assert_eq(lines, 3, "%s", out);
}

/* Every program and subcommand: its path under the build, the words before
 * the options, and an option that takes a value (NULL: it has none). */
static const struct {
  const char *program, *sub, *valued;
} programs[] = {
    {"bin/aq-info", "", "--code-object"},     {"bin/aq-bench", "", NULL},
    {"bin/aq-bench", "queue", "--reps"},      {"bin/aq-bench", "gemm", "--sizes"},
    {"bin/aq-bench", "conv", "--shapes"},     {"bin/aq-bench", "tasks", "--n"},
    {"bin/aq-bench", "dispatch", "--n"},      {"bin/aq-bench", "train", "--epochs"},
    {"bin/aq-trace", "", NULL},               {"bin/aq-trace", "summary", "--top"},
    {"bin/aq-trace", "svg", "-o"},            {"bin/aq-trace", "diff", NULL},
    {"examples/train_fashion", "", "--epochs"}, {"examples/hello", "", NULL},
    {"examples/user_kernels", "", "--code-object"},
};
enum { PROGRAMS = sizeof(programs) / sizeof(programs[0]) };

/* No GPU needed: --explain dispatches nothing. */
Test(aq_bench_cli, conv_explain_names_each_pass_build_and_path) {
  char out[8192];
  const char *two = "conv --agent gpu --explain --shapes '256,1,28,28,6,5,5,1,2;32,64,56,56,64,3,3,1,1'";
  cr_assert_eq(run_program("bin/aq-bench", two, out, sizeof(out)), 0, "%s", out);
  cr_assert(strstr(out, "conv 256,1,28,28,6,5,5,1,2 f32 bwd_filter: aq_conv2d_bwd_filter_f32_staged16, staged"), "%s", out);
  cr_assert(strstr(out, "bf16 bwd_filter: aq_conv2d_bwd_filter_bf16_staged16, staged"), "%s", out);
  cr_assert(strstr(out, "conv 32,64,56,56,64,3,3,1,1 f32 fwd: aq_conv2d_f32_wino, Winograd's F(2x2, 3x3), a block 32 output "
                        "tiles of 2x2 by 32 channels, its products in FFMA; the launch rule's"),
            "%s", out);
  cr_assert(strstr(out, "conv 32,64,56,56,64,3,3,1,1 bf16 bwd_data: aq_conv2d_bwd_data_bf16_wino, Winograd's F(2x2, 3x3), a "
                        "block 32 output tiles of 2x2 by 32 channels, its products on tensor cores (3xTF32);"),
            "%s", out);
  /* 4 tiles of 32x32 would leave most of an H100's clusters idle: 16-row ones for fp32; bf16 a cluster of 16 a row of taps */
  cr_assert(strstr(out, "f32 bwd_filter: aq_conv2d_bwd_filter_f32_wino_thin, Winograd's F(3x3, 2x2), a cluster of 16 a "
                        "16x32 tile of dw splitting dy's tiles, its products on tensor cores (3xTF32)"),
            "%s", out);
  cr_assert(strstr(out, "conv 32,64,56,56,64,3,3,1,1 f32 bwd_data: aq_conv2d_bwd_data_f32_wino, Winograd's"), "%s", out);
  cr_assert(strstr(out, "conv 32,64,56,56,64,3,3,1,1 bf16 fwd: aq_conv2d_bf16, implicit GEMM on tensor cores, a block a "
                        "128x64 tile;"),
            "%s", out);
  cr_assert(strstr(out, "bf16 bwd_filter: aq_conv2d_bwd_filter_bf16_rows, tensor cores, a cluster of 16 a filter row of a "
                        "64-filter x 32-channel tile, splitting dy's rows (staged whole); the launch rule's"),
            "%s", out);
  const char *exact = "conv --agent gpu --explain --precision exact --dtype f32 --shapes 32,64,56,56,64,3,3,1,1";
  cr_assert_eq(run_program("bin/aq-bench", exact, out, sizeof(out)), 0, "%s", out);
  cr_assert(strstr(out, "conv 32,64,56,56,64,3,3,1,1 f32 fwd: aq_conv2d_f32_ffma, implicit GEMM in FFMA, a block a 128x64 tile"),
            "exact: FFMA: %s", out);
  cr_assert(strstr(out, "f32 bwd_filter: aq_conv2d_bwd_filter_f32_ffma, implicit GEMM in FFMA, a cluster of 8 a 128x64 tile "
                        "splitting its depth; the launch rule's"),
            "%s", out);
  cr_assert_eq(run_program("bin/aq-bench", "conv --agent gpu --explain --precision tf32", out, sizeof(out)), 2);
  cr_assert(strstr(out, "--precision tf32: expected default"), "%s", out);
  cr_assert_eq(run_program("bin/aq-bench", "conv --agent gpu --explain --shapes 4,1,8,8,2,3,3,0,1", out, sizeof(out)), 2);
  cr_assert(strstr(out, "bad shape '4,1,8,8,2,3,3,0,1'"), "%s", out);
  const char *none = "conv --agent gpu --explain --shapes 4,1,3,3,2,5,5,1,0"; /* a 5x5 filter, a 3x3 image */
  cr_assert_eq(run_program("bin/aq-bench", none, out, sizeof(out)), 2, "no output positions: %s", out);
  cr_assert(strstr(out, "shape '4,1,3,3,2,5,5,1,0' has no output"), "%s", out);
  /* the CPU suite reads --shapes the same way, and checks the whole list before it measures anything */
  const char *late = "conv --shapes '2,1,8,8,2,3,3,1,1;2,1,8,8,2,3,3,1,1x' --reps 1";
  cr_assert_eq(run_program("bin/aq-bench", late, out, sizeof(out)), 2, "%s", out);
  cr_assert(strstr(out, "bad shape '2,1,8,8,2,3,3,1,1x'"), "%s", out);
  cr_assert(!strstr(out, "\"bench\""), "nothing measured before the bad entry was refused: %s", out);
  const char *one = "conv --shapes 2,1,8,8,2,3,3,1,1 --reps 1 --passes bwd_filter --order blocks";
  cr_assert_eq(run_program("bin/aq-bench", one, out, sizeof(out)), 0, "%s", out);
  cr_assert(strstr(out, "\"pass\":\"bwd_filter\"") && strstr(out, "\"order\":\"blocks\""), "%s", out);
  cr_assert(!strstr(out, "\"pass\":\"fwd\"") && !strstr(out, "\"pass\":\"bwd_data\""), "one pass: %s", out);
  cr_assert_eq(run_program("bin/aq-bench", "conv --explain", out, sizeof(out)), 2);
  cr_assert(strstr(out, "--explain is for --agent gpu"), "%s", out);
}

Test(cli, every_program_answers_help_on_stdout_with_its_options) {
  for (size_t i = 0; i < PROGRAMS; ++i) {
    char out[8192], args[128];
    snprintf(args, sizeof(args), "%s --help", programs[i].sub);
    int rc = run_program_to(programs[i].program, args, "/dev/null", out, sizeof(out));
    cr_assert_eq(rc, 0, "%s %s: exit %d: %s", programs[i].program, args, rc, out);
    cr_assert(strstr(out, "usage: ") && strstr(out, "--help"), "%s %s: %s", programs[i].program, args, out);
    cr_assert(!programs[i].valued || strstr(out, programs[i].valued), "%s %s lists %s: %s", programs[i].program, args,
              programs[i].valued, out);
    cr_assert(!strstr(out, "\"bench\""), "%s %s ran nothing: %s", programs[i].program, args, out);
  }
}

Test(cli, every_program_refuses_an_unknown_option_by_name) {
  for (size_t i = 0; i < PROGRAMS; ++i) {
    char out[8192], args[128];
    snprintf(args, sizeof(args), "%s --frobnicate", programs[i].sub);
    cr_assert_eq(run_program(programs[i].program, args, out, sizeof(out)), 2, "%s %s: %s", programs[i].program, args,
                 out);
    cr_assert(strstr(out, "unknown option --frobnicate"), "%s %s: %s", programs[i].program, args, out);
  }
}

Test(cli, every_program_refuses_an_option_without_its_value_by_name) {
  for (size_t i = 0; i < PROGRAMS; ++i) {
    if (!programs[i].valued) continue;
    char out[8192], args[128], want[64];
    snprintf(args, sizeof(args), "%s %s", programs[i].sub, programs[i].valued);
    const char *name = programs[i].valued;
    snprintf(want, sizeof(want), "%s is missing", !strcmp(name, "-o") ? "--output" : name);
    cr_assert_eq(run_program(programs[i].program, args, out, sizeof(out)), 2, "%s %s: %s", programs[i].program, args,
                 out);
    cr_assert(strstr(out, want), "%s %s: wanted '%s': %s", programs[i].program, args, want, out);
  }
}

Test(cli, bad_values_are_refused_by_name) {
  const struct {
    const char *program, *args, *want;
  } bad[] = {
      {"bin/aq-bench", "gemm --agent tpu", "--agent tpu: expected cpu or gpu"},
      {"bin/aq-bench", "conv --agent tpu", "--agent tpu: expected cpu or gpu"},
      {"bin/aq-bench", "conv --passes fwd,bwd", "--passes: 'bwd' is not fwd, bwd_data or bwd_filter"},
      {"bin/aq-bench", "conv --order random", "--order random: expected interleaved or blocks"},
      {"bin/aq-bench", "tasks --shape bogus", "--shape bogus: expected independent, chain"},
      {"bin/aq-bench", "train --placement bogus", "--placement bogus: expected auto, cpu or gpu"},
      {"bin/aq-bench", "queue --reps 0", "--reps 0: expected a value in [1, 1000000]"},
      {"bin/aq-bench", "queue --case frob", "--case frob: expected dispatch, barrier_and or wakeup"},
      {"bin/aq-bench", "queue extra", "unexpected argument 'extra'"},
      {"bin/aq-bench", "bogus", "unknown suite 'bogus'"},
      {"bin/aq-bench", "", "SUITE is missing"},
      {"bin/aq-bench", "tasks --no-metg=1", "--no-metg takes no value"},
      {"examples/train_fashion", "--placement bogus", "--placement bogus: expected auto, cpu, gpu"},
      {"examples/train_fashion", "--epochs ten", "--epochs ten: expected an integer"},
      {"bin/aq-trace", "svg run.json", "aq-trace svg: -o OUT.svg is missing"},
      {"bin/aq-trace", "svg -o x.svg", "aq-trace svg: FILE... is missing"},
      {"bin/aq-trace", "diff a.json", "aq-trace diff: expected A B"},
      {"bin/aq-trace", "bogus", "unknown command 'bogus'"},
      {"bin/aq-trace", "summary --top 0 x.json", "--top 0: expected a value in [1, 100000]"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    char out[8192];
    cr_assert_eq(run_program(bad[i].program, bad[i].args, out, sizeof(out)), 2, "%s %s: %s", bad[i].program,
                 bad[i].args, out);
    cr_assert(strstr(out, bad[i].want), "%s %s: wanted '%s': %s", bad[i].program, bad[i].args, bad[i].want, out);
  }
}

/* The user-kernel example: its own code object, two queues, barrier-AND and
 * barrier-OR, and a checked result; a code object it cannot load is named. */
Test(examples, user_kernels_runs_its_own_code_object) {
  char out[4096];
  cr_assert_eq(run_program("examples/user_kernels", "--n 5000", out, sizeof(out)), 0, "%s", out);
  cr_assert(strstr(out, "5000 elements") && strstr(out, "y[i] = i + 0.5 for every i"), "%s", out);
  cr_assert_eq(run_program("examples/user_kernels", "--code-object /nonexistent/k.so", out, sizeof(out)), 1, "%s", out);
  cr_assert(strstr(out, "/nonexistent/k.so"), "%s", out);
}

/* aq-trace svg: a colour per kind of work with a legend entry for each kind
 * drawn (spans too), and windows: --from/--to in ms, --run N. */
static const char *small_trace =
    "{\"traceEvents\":[\n"
    "{\"name\":\"aq_matmul_f32\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":0,\"dur\":100,\"pid\":0,\"tid\":1,"
    "\"args\":{\"exec\":0,\"run\":0,\"task\":0}},\n"
    "{\"name\":\"aq_relu_f32\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":100,\"dur\":50,\"pid\":0,\"tid\":1,"
    "\"args\":{\"exec\":0,\"run\":0,\"task\":1}},\n"
    "{\"name\":\"memcpy\",\"cat\":\"copy\",\"ph\":\"X\",\"ts\":150,\"dur\":20,\"pid\":0,\"tid\":2}\n,"
    "{\"name\":\"graph run\",\"cat\":\"runtime\",\"ph\":\"X\",\"ts\":0,\"dur\":170,\"pid\":9,\"tid\":0}\n,"
    "{\"name\":\"aq_matmul_f32\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":5000,\"dur\":100,\"pid\":0,\"tid\":1,"
    "\"args\":{\"exec\":0,\"run\":1,\"task\":0}},\n"
    "{\"name\":\"aq_conv2d_f32\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":5100,\"dur\":100,\"pid\":0,\"tid\":1,"
    "\"args\":{\"exec\":0,\"run\":1,\"task\":1}}\n"
    "]}\n";

static char *svg_of(const char *options, int *rc) {
  static char out[1 << 16];
  char trace[64], svg[64];
  snprintf(trace, sizeof(trace), "/tmp/aq-cli-trace-%d.json", (int)getpid());
  snprintf(svg, sizeof(svg), "/tmp/aq-cli-trace-%d.svg", (int)getpid());
  FILE *f = fopen(trace, "w");
  cr_assert(f);
  fputs(small_trace, f);
  fclose(f);
  char args[512];
  snprintf(args, sizeof(args), "svg %s -o %s %s", trace, svg, options);
  *rc = run_program("bin/aq-trace", args, out, sizeof(out));
  if (*rc != 0) {
    unlink(trace);
    return out;
  }
  f = fopen(svg, "r");
  cr_assert(f);
  size_t n = fread(out, 1, sizeof(out) - 1, f);
  out[n] = '\0';
  fclose(f);
  unlink(svg), unlink(trace);
  return out;
}

Test(aq_trace_svg, kinds_of_work_have_their_colours_and_a_legend) {
  int rc;
  char *s = svg_of("", &rc);
  cr_assert_eq(rc, 0, "%s", s);
  const char *legend[] = {">matmul (", ">elementwise (", ">copy (", ">runtime span (", ">conv ("};
  for (size_t i = 0; i < 5; ++i) cr_assert(strstr(s, legend[i]), "no legend entry %s", legend[i]);
  cr_assert(strstr(s, "fill='#0072B2'") && strstr(s, "fill='#E69F00'") && strstr(s, "fill='#009E73'"), "%s", s);
  cr_assert(!strstr(s, ">host ("), "no legend entry for a kind not drawn");
}

Test(aq_trace_svg, a_window_draws_only_what_falls_in_it) {
  int rc;
  char *s = svg_of("--run 1", &rc);
  cr_assert_eq(rc, 0, "%s", s);
  cr_assert(strstr(s, "run 1, ") && strstr(s, ">conv (") && !strstr(s, ">copy ("), "%s", s);
  s = svg_of("--from 0 --to 0.16", &rc);
  cr_assert_eq(rc, 0, "%s", s);
  cr_assert(strstr(s, ">elementwise (") && !strstr(s, ">conv ("), "%s", s);
  s = svg_of("--run 7", &rc);
  cr_assert_eq(rc, 1, "%s", s);
  cr_assert(strstr(s, "has no run 7"), "%s", s);
  s = svg_of("--run 1 --from 0", &rc);
  cr_assert_eq(rc, 2, "%s", s);
  s = svg_of("--from 2 --to 1", &rc);
  cr_assert_eq(rc, 2, "%s", s);
  cr_assert(strstr(s, "--from 2 is not before --to 1"), "%s", s);
}
