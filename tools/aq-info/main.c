/* aq-info: what Aquila sees on this machine, as rocminfo does for ROCm:
 * topology, agents, their queues' limits and memory regions, the drivers that
 * did not start and why, the code objects found, and the settings in force.
 *
 *   aq-info                     everything (with the builds auto-tuning chose per GPU model)
 *   aq-info --code-object FILE  load one code object and list its kernels
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aquila/aquila.h"
#include "tools/common/cli.h"

static int fail(const char *what, aq_status_t s) {
  fprintf(stderr, "aq-info: %s: %s: %s\n", what, aq_status_string(s), aq_last_error());
  return 1;
}

static void print_features(uint64_t f) {
  static const struct { uint64_t bit; const char *name; } names[] = {
      {AQ_FEATURE_KERNEL_DISPATCH, "kernel-dispatch"}, {AQ_FEATURE_AGENT_DISPATCH, "agent-dispatch"},
      {AQ_FEATURE_AVX2, "avx2"}, {AQ_FEATURE_FMA, "fma"}, {AQ_FEATURE_AVX512F, "avx512f"},
      {AQ_FEATURE_AVX512BW, "avx512bw"}, {AQ_FEATURE_AVX512BF16, "avx512bf16"}, {AQ_FEATURE_AMX, "amx"}};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    if (f & names[i].bit) printf(" %s", names[i].name);
  printf("\n");
}

static void print_regions(aq_agent_t agent) {
  aq_region_t r[8];
  size_t n = 0;
  if (aq_agent_regions(agent, r, 8, &n) != AQ_OK) return;
  for (size_t i = 0; i < n && i < 8; ++i) {
    aq_region_info_t ri;
    if (aq_region_get_info(r[i], &ri) != AQ_OK) continue;
    printf("    region %-18s %s%s%s%s%s%s%s node %d%s, %.1f GiB, in use %llu B in %llu allocations (peak %llu B)\n",
           ri.name, ri.flags & AQ_REGION_COARSE_GRAINED ? "coarse " : "",
           ri.flags & AQ_REGION_FINE_GRAINED ? "fine " : "", ri.flags & AQ_REGION_KERNARG ? "kernarg " : "",
           ri.flags & AQ_REGION_DEVICE ? "device " : "", ri.flags & AQ_REGION_MANAGED ? "managed " : "",
           ri.flags & AQ_REGION_ZEROED ? "zeroed " : "", ri.flags & AQ_REGION_HOST_ACCESSIBLE ? "host-accessible" : "", ri.numa_node,
           ri.bound ? " (bound)" : "", (double)ri.size / (1024.0 * 1024 * 1024),
           (unsigned long long)ri.in_use, (unsigned long long)ri.allocations, (unsigned long long)ri.peak);
  }
}

static int list_kernels(const char *path, int verbose) {
  aq_code_object_t co;
  aq_status_t s = aq_code_object_load(path, &co);
  if (s != AQ_OK) {
    if (verbose) return fail(path, s);
    printf("  %-40s cannot load: %s\n", path, aq_last_error());
    return 1;
  }
  aq_code_object_info_t info;
  aq_code_object_get_info(co, &info);
  printf("  %s\n    format %s, producer \"%s\", %u kernels\n", info.path, info.format, info.producer,
         info.kernel_count);
  aq_agent_t agents[64];
  size_t na = 0;
  aq_agents(agents, 64, &na);
  int shown = 0;
  for (size_t a = 0; a < na && a < 64 && !shown; ++a) {
    aq_kernel_info_t k;
    if (aq_code_object_kernel_at(co, 0, agents[a], &k) != AQ_OK) continue;
    for (uint32_t i = 0; i < info.kernel_count && (verbose || i < 8); ++i)
      if (aq_code_object_kernel_at(co, i, agents[a], &k) == AQ_OK)
        printf("    %-32s kernarg %4u B (align %u), group segment %u B\n", k.name, k.kernarg_size,
               k.kernarg_alignment, k.group_segment_size);
    if (!verbose && info.kernel_count > 8) printf("    ... (aq-info --code-object %s lists all)\n", info.path);
    shown = 1;
  }
  if (!shown) printf("    no agent here runs this format\n");
  aq_code_object_unload(co);
  return 0;
}

/* Which collective backends load (libmpi.so.40, libnccl.so.2), and why
 * one does not. */
static void list_collectives(void) {
  static const char *backends[] = {"mpi", "nccl"};
  printf("\nCollectives\n");
  for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); ++i) {
    const char *msg;
    if (aq_comm_backend_status(backends[i], &msg) != AQ_OK) printf("  %-5s not built in\n", backends[i]);
    else printf("  %-5s %s\n", backends[i], *msg ? msg : "loaded");
  }
}

/* The builds auto-tuning chose for each GPU agent's model (AQ_PERF_DIR/tuned.tsv). */
static void list_tuned(const aq_agent_t *agents, size_t n) {
  printf("\nTuned builds (AQ_PERF_DIR/tuned.tsv; AQ_TUNE=0 turns tuning off)\n");
  int gpus = 0;
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t a;
    if (aq_agent_get_info(agents[i], &a) != AQ_OK || a.kind != AQ_AGENT_KIND_GPU) continue;
    aq_tuned_build_t t[64];
    size_t count = 0;
    gpus++;
    if (aq_tuned_builds(agents[i], t, 64, &count) != AQ_OK) continue;
    printf("  %s (%s): %zu shape%s tuned%s\n", a.name, a.device, count, count == 1 ? "" : "s", count ? "" : " yet");
    for (size_t k = 0; k < count && k < 64; ++k) {
      printf("    %s %s: %s (", t[k].kernel, t[k].shape, t[k].build);
      for (uint32_t c = 0; c < t[k].candidates; ++c)
        printf("%s%s %.1f us", c ? ", " : "", t[k].candidate[c], t[k].candidate_ns[c] / 1e3);
      printf(")\n");
    }
  }
  if (!gpus) printf("  no GPU agent here\n");
}

static void list_code_objects(void) {
  static const char *ours[] = {"kernels-cpu.so", "kernels-cuda.fatbin", "kernels-amdgcn.hsaco"};
  printf("\nCode objects\n");
  for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); ++i) {
    aq_code_object_t co;
    if (aq_code_object_load(ours[i], &co) == AQ_OK) {
      aq_code_object_unload(co);
      list_kernels(ours[i], 0);
    } else {
      printf("  %-24s %s\n", ours[i], aq_last_error());
    }
  }
}

int main(int argc, char **argv) {
  static const cli_option_t options[] = {
      {"code-object", 'c', CLI_TEXT, "FILE", "load this code object and list its kernels, or say why it cannot load",
       0, 0},
  };
  cli_t c = {.program = "aq-info", .options = options, .count = 1,
             .about = "What Aquila sees here: topology, agents, queues, memory regions, drivers, code objects\n"
                      "and the settings in force."};
  cli_parse(&c, argc, argv);
  const char *only = cli_text(&c, "code-object", NULL);
  aq_status_t s = aq_init(NULL);
  if (s != AQ_OK) return fail("aq_init", s);
  if (only) {
    int rc = list_kernels(only, 1);
    aq_shut_down();
    return rc;
  }
  aq_topology_info_t t;
  if ((s = aq_topology_get_info(&t)) != AQ_OK) return fail("topology", s);
  printf("Topology (%s)\n  %u packages, %u NUMA nodes, %u cores, %u PUs; L1d %llu KiB, L2 %llu KiB, L3 %llu KiB\n",
         t.source, t.packages, t.numa_nodes, t.cores, t.pus, (unsigned long long)t.l1d_bytes / 1024,
         (unsigned long long)t.l2_bytes / 1024, (unsigned long long)t.l3_bytes / 1024);

  aq_agent_t agents[64];
  size_t n = 0;
  if ((s = aq_agents(agents, 64, &n)) != AQ_OK) return fail("agents", s);
  printf("\nAgents (%zu)\n", n);
  for (size_t i = 0; i < n && i < 64; ++i) {
    aq_agent_info_t a;
    if (aq_agent_get_info(agents[i], &a) != AQ_OK) continue;
    printf("  %s: %s\n    kind %s, driver %s, isa %s, NUMA node %d, %u %s%s\n", a.name, a.device,
           a.kind == AQ_AGENT_KIND_CPU ? "CPU" : "GPU", a.driver, a.isa, a.numa_node, a.compute_units,
           a.kind == AQ_AGENT_KIND_CPU ? "workers" : "compute units", a.usable ? "" : ", UNUSABLE (needs reset)");
    printf("    queues: up to %u of %u packets; work-group up to %u\n    features:", a.queues_max,
           a.queue_max_size, a.workgroup_max_size);
    print_features(a.features);
    print_regions(agents[i]);
  }
  printf("\nDrivers\n");
  static const char *drivers[] = {"cpu", "cuda", "rocr"};
  for (size_t i = 0; i < 3; ++i) {
    const char *msg;
    if (aq_driver_status(drivers[i], &msg) != AQ_OK) printf("  %-5s not built in\n", drivers[i]);
    else printf("  %-5s %s\n", drivers[i], *msg ? msg : "started");
  }
  list_tuned(agents, n < 64 ? n : 64);
  list_collectives();
  list_code_objects();
  aq_setting_t set[32];
  size_t ns = 0;
  aq_settings(set, 32, &ns);
  printf("\nSettings\n");
  for (size_t i = 0; i < ns && i < 32; ++i)
    printf("  %-22s = %-10s (%s)  %s\n", set[i].name, set[i].value, set[i].source, set[i].help);
  aq_shut_down();
  return 0;
}
