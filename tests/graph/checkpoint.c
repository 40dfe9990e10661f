/* Checkpoints (aq_exec_save / aq_exec_load): a round trip on CPU agents
 * goes on bit for bit where the saved exec goes on; the file is what
 * graph.h says (its CRC is zlib's); and every file that does not suit the
 * exec is refused by name, leaving the exec as it was. */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include "../runtime/common.h"

static char dir[64];

static void setup(void) {
  AQ_ASSERT_OK(aq_init(NULL));
  snprintf(dir, sizeof(dir), "/tmp/aq-ckpt-XXXXXX");
  cr_assert(mkdtemp(dir), "cannot make a temporary directory");
}

static void teardown(void) {
  char cmd[96];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
  aq_shut_down();
}
TestSuite(checkpoint, .init = setup, .fini = teardown);

enum { B = 8, IN = 16, OUT = 4, STEPS = 3 };

/* x -> relu(x w1 + b1) -> w2 + b2 -> softmax cross-entropy; SGD with
 * momentum on the first layer, Adam on the second: velocities, moments and
 * Adam's step count are all state to keep. */
typedef struct net {
  aq_graph_t *g;
  aq_exec_t *e;
  aq_tensor_t x, y, w1, b1, w2, b2, loss;
} net_t;

static void param(net_t *n, const char *name, uint32_t rank, const int64_t *dims, aq_tensor_t *out, uint64_t seed) {
  AQ_ASSERT_OK(aq_tensor_create(n->g, name, AQ_DTYPE_F32, AQ_ROLE_PARAMETER, rank, dims, out));
  AQ_ASSERT_OK(aq_tensor_init(n->g, *out, &(aq_initializer_t){.kind = AQ_INIT_UNIFORM, .low = -0.5f, .high = 0.5f, .seed = seed}));
}

/* hidden: the first layer's width; extra: a parameter nothing reads. */
static void build(net_t *n, int64_t hidden, int extra) {
  AQ_ASSERT_OK(aq_graph_create(NULL, &n->g));
  AQ_ASSERT_OK(aq_tensor_create(n->g, "x", AQ_DTYPE_F32, AQ_ROLE_INPUT, 2, (int64_t[]){B, IN}, &n->x));
  AQ_ASSERT_OK(aq_tensor_create(n->g, "y", AQ_DTYPE_I32, AQ_ROLE_INPUT, 1, (int64_t[]){B}, &n->y));
  param(n, "w1", 2, (int64_t[]){IN, hidden}, &n->w1, 1);
  param(n, "b1", 1, (int64_t[]){hidden}, &n->b1, 2);
  param(n, "w2", 2, (int64_t[]){hidden, OUT}, &n->w2, 3);
  param(n, "b2", 1, (int64_t[]){OUT}, &n->b2, 4);
  if (extra) {
    aq_tensor_t unused;
    param(n, "extra", 1, (int64_t[]){3}, &unused, 5);
  }
  aq_tensor_t h, logits, g;
  AQ_ASSERT_OK(aq_op_matmul(n->g, n->x, n->w1, n->b1, 0, 0, AQ_ACTIVATION_RELU, &h));
  AQ_ASSERT_OK(aq_op_matmul(n->g, h, n->w2, n->b2, 0, 0, AQ_ACTIVATION_NONE, &logits));
  AQ_ASSERT_OK(aq_op_softmax_xent(n->g, logits, n->y, &n->loss));
  AQ_ASSERT_OK(aq_graph_backward(n->g, n->loss));
  aq_sgd_options_t sgd = {.lr = 0.1f, .momentum = 0.9f};
  aq_adam_options_t adam = {.lr = 0.01f};
  AQ_ASSERT_OK(aq_graph_gradient(n->g, n->w1, &g));
  AQ_ASSERT_OK(aq_op_sgd(n->g, n->w1, g, &sgd));
  AQ_ASSERT_OK(aq_graph_gradient(n->g, n->b1, &g));
  AQ_ASSERT_OK(aq_op_sgd(n->g, n->b1, g, &sgd));
  AQ_ASSERT_OK(aq_graph_gradient(n->g, n->w2, &g));
  AQ_ASSERT_OK(aq_op_adam(n->g, n->w2, g, &adam));
  AQ_ASSERT_OK(aq_graph_gradient(n->g, n->b2, &g));
  AQ_ASSERT_OK(aq_op_adam(n->g, n->b2, g, &adam));
  aq_exec_options_t eo = {.policy = AQ_SCHED_EAGER, .kernel_agent_kinds = 1u << AQ_AGENT_KIND_CPU};
  AQ_ASSERT_OK(aq_graph_instantiate(n->g, &eo, &n->e));
}

static void destroy(net_t *n) {
  AQ_ASSERT_OK(aq_exec_destroy(n->e));
  AQ_ASSERT_OK(aq_graph_destroy(n->g));
}

/* Step k's batch: a different one every step. */
static float step(net_t *n, int k) {
  float x[B * IN];
  int32_t y[B];
  for (int i = 0; i < B * IN; ++i) x[i] = (float)((i * 7 + k * 13) % 17) / 17.0f - 0.4f;
  for (int i = 0; i < B; ++i) y[i] = (i + k) % OUT;
  AQ_ASSERT_OK(aq_exec_write(n->e, n->x, x, sizeof(x)));
  AQ_ASSERT_OK(aq_exec_write(n->e, n->y, y, sizeof(y)));
  AQ_ASSERT_OK(aq_exec_run(n->e));
  AQ_ASSERT_OK(aq_exec_wait(n->e, 30 * SEC));
  float loss;
  AQ_ASSERT_OK(aq_exec_read(n->e, n->loss, &loss, sizeof(loss)));
  return loss;
}

/* Every parameter, side by side (hidden 12). */
enum { HIDDEN = 12, PARAMS = IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT };
static void params(net_t *n, float *out) {
  AQ_ASSERT_OK(aq_exec_read(n->e, n->w1, out, IN * HIDDEN * 4));
  AQ_ASSERT_OK(aq_exec_read(n->e, n->b1, out + IN * HIDDEN, HIDDEN * 4));
  AQ_ASSERT_OK(aq_exec_read(n->e, n->w2, out + IN * HIDDEN + HIDDEN, HIDDEN * OUT * 4));
  AQ_ASSERT_OK(aq_exec_read(n->e, n->b2, out + IN * HIDDEN + HIDDEN + HIDDEN * OUT, OUT * 4));
}

static uint64_t runs(net_t *n) {
  aq_exec_info_t info;
  AQ_ASSERT_OK(aq_exec_get_info(n->e, &info));
  return info.runs;
}

static void path_of(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", dir, name); }

static size_t file_size(const char *path) {
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s exists", path);
  return (size_t)st.st_size;
}

static uint8_t *slurp_bytes(const char *path, size_t *size) {
  *size = file_size(path);
  uint8_t *buf = malloc(*size);
  FILE *f = fopen(path, "rb");
  cr_assert(f && buf && fread(buf, 1, *size, f) == *size);
  fclose(f);
  return buf;
}

static void spit(const char *path, const void *buf, size_t size) {
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(buf, 1, size, f) == size);
  fclose(f);
}

Test(checkpoint, a_round_trip_goes_on_bit_for_bit) {
  net_t a, b;
  build(&a, HIDDEN, 0);
  for (int k = 0; k < STEPS; ++k) step(&a, k);
  char path[128];
  path_of(path, sizeof(path), "a.ckpt");
  AQ_ASSERT_OK(aq_exec_save(a.e, path));
  static float saved[PARAMS], loaded[PARAMS], after_a[PARAMS], after_b[PARAMS];
  params(&a, saved);
  float loss_a[STEPS], loss_b[STEPS];
  for (int k = 0; k < STEPS; ++k) loss_a[k] = step(&a, STEPS + k);
  params(&a, after_a);

  build(&b, HIDDEN, 0);
  AQ_ASSERT_OK(aq_exec_load(b.e, path));
  cr_assert_eq(runs(&b), STEPS, "the run count comes back");
  params(&b, loaded);
  cr_assert(!memcmp(saved, loaded, sizeof(saved)), "the parameters come back bit for bit");
  for (int k = 0; k < STEPS; ++k) loss_b[k] = step(&b, STEPS + k);
  params(&b, after_b);
  for (int k = 0; k < STEPS; ++k)
    cr_assert(!memcmp(&loss_a[k], &loss_b[k], 4), "step %d: loss %.9g, resumed %.9g", STEPS + k, (double)loss_a[k],
              (double)loss_b[k]);
  cr_assert(!memcmp(after_a, after_b, sizeof(after_a)),
            "the optimizer state came back too: the same parameters after the same steps");
  cr_assert_eq(runs(&b), 2 * STEPS);
  destroy(&a), destroy(&b);
}

Test(checkpoint, the_file_is_as_documented_and_written_atomically) {
  net_t n;
  build(&n, HIDDEN, 0);
  step(&n, 0);
  char path[128];
  path_of(path, sizeof(path), "n.ckpt");
  const char blob[] = "epoch 7";
  AQ_ASSERT_OK(aq_exec_save_with(n.e, path, blob, sizeof(blob)));
  size_t size;
  uint8_t *buf = slurp_bytes(path, &size);
  cr_assert(!memcmp(buf, "AQCKPT\n\032", 8));
  uint32_t version, tensors, crc;
  uint64_t nruns, user, bytes;
  memcpy(&version, buf + 8, 4), memcpy(&tensors, buf + 12, 4), memcpy(&nruns, buf + 16, 8);
  memcpy(&user, buf + 24, 8), memcpy(&bytes, buf + 32, 8), memcpy(&crc, buf + size - 4, 4);
  cr_assert_eq(version, 1);
  cr_assert_eq(tensors, 4 + 2 + 2 * 3, "4 parameters, 2 velocities, Adam's m, v and step count twice: %u", tensors);
  cr_assert_eq(nruns, 1);
  cr_assert_eq(user, sizeof(blob));
  cr_assert_eq(bytes, size);
  cr_assert_eq(crc, (uint32_t)crc32(0, buf, (uInt)(size - 4)), "the CRC is zlib's crc32");
  cr_assert(!memcmp(buf + size - 4 - sizeof(blob), blob, sizeof(blob)), "the user data sits before the CRC");
  uint32_t len;
  memcpy(&len, buf + 40, 4);
  cr_assert(len == 2 && !memcmp(buf + 44, "w1", 2), "the first record is w1");
  free(buf);
  char back[16];
  size_t got = 0;
  AQ_ASSERT_OK(aq_checkpoint_user_data(path, back, sizeof(back), &got));
  cr_assert(got == sizeof(blob) && !strcmp(back, blob));
  cr_assert_eq(aq_checkpoint_user_data(path, back, 3, &got), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(aq_last_error(), "8 bytes of user data"), "%s", aq_last_error());
  /* Saved over itself, its temporary file gone, and so is one a killed
   * saver left (no such process); a live saver's is left alone. */
  char stale[160], live[160];
  snprintf(stale, sizeof(stale), "%s.tmp.999999999", path);
  snprintf(live, sizeof(live), "%s.tmp.%d", path, (int)getppid());
  spit(stale, "half", 4), spit(live, "half", 4);
  AQ_ASSERT_OK(aq_exec_save(n.e, path));
  cr_assert(access(stale, F_OK) != 0, "the killed saver's temporary file is removed");
  cr_assert_eq(unlink(live), 0, "the live saver's is kept");
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *de; (de = readdir(d));) entries += de->d_name[0] != '.';
  closedir(d);
  cr_assert_eq(entries, 1);
  /* A directory that does not exist: refused, nothing written. */
  char nowhere[160];
  snprintf(nowhere, sizeof(nowhere), "%s/no/such/dir.ckpt", dir);
  cr_assert_eq(aq_exec_save(n.e, nowhere), AQ_ERROR_IO);
  cr_assert(strstr(aq_last_error(), "no/such/dir.ckpt"), "%s", aq_last_error());
  destroy(&n);
}

/* Loading path into a fresh exec of hidden width is refused with status and
 * a message containing what; the exec is left as it was. */
static void refused(const char *path, int64_t hidden, int extra, aq_status_t status, const char *what) {
  net_t n;
  build(&n, hidden, extra);
  step(&n, 0);
  aq_tensor_info_t info;
  AQ_ASSERT_OK(aq_tensor_get_info(n.g, n.w1, &info));
  float *before = malloc(info.bytes), *after = malloc(info.bytes);
  AQ_ASSERT_OK(aq_exec_read(n.e, n.w1, before, info.bytes));
  cr_assert_eq(aq_exec_load(n.e, path), status, "%s: %s", what, aq_last_error());
  cr_assert(strstr(aq_last_error(), what), "the error says '%s': %s", what, aq_last_error());
  AQ_ASSERT_OK(aq_exec_read(n.e, n.w1, after, info.bytes));
  cr_assert(!memcmp(before, after, info.bytes), "%s: the parameters are as they were", what);
  cr_assert_eq(runs(&n), 1, "%s: the run count is as it was", what);
  step(&n, 1); /* and the exec still runs */
  free(before), free(after);
  destroy(&n);
}

/* A valid checkpoint of a net (hidden, extra) at dir/name; its bytes. */
static uint8_t *saved_file(const char *name, int64_t hidden, int extra, char *path, size_t path_size, size_t *size) {
  net_t n;
  build(&n, hidden, extra);
  step(&n, 5), step(&n, 6);
  path_of(path, path_size, name);
  AQ_ASSERT_OK(aq_exec_save(n.e, path));
  destroy(&n);
  return slurp_bytes(path, size);
}

static void rewrite_crc(uint8_t *buf, size_t size) {
  uint32_t crc = (uint32_t)crc32(0, buf, (uInt)(size - 4));
  memcpy(buf + size - 4, &crc, 4);
}

Test(checkpoint, files_that_are_not_whole_checkpoints_are_refused) {
  char path[128], bad[128];
  size_t size;
  uint8_t *buf = saved_file("good.ckpt", HIDDEN, 0, path, sizeof(path), &size);
  path_of(bad, sizeof(bad), "missing.ckpt");
  refused(bad, HIDDEN, 0, AQ_ERROR_NOT_FOUND, "missing.ckpt does not exist");
  path_of(bad, sizeof(bad), "foreign.ckpt");
  spit(bad, "# aquila performance models v2\nnot a checkpoint\n", 48);
  refused(bad, HIDDEN, 0, AQ_ERROR_IO, "is not an Aquila checkpoint");
  spit(bad, "AQ", 2);
  refused(bad, HIDDEN, 0, AQ_ERROR_IO, "is not an Aquila checkpoint");
  path_of(bad, sizeof(bad), "truncated.ckpt");
  for (size_t cut = 20; cut < size; cut += size / 3) {
    spit(bad, buf, cut);
    refused(bad, HIDDEN, 0, AQ_ERROR_IO, "is truncated");
  }
  path_of(bad, sizeof(bad), "flipped.ckpt");
  buf[size / 2] ^= 0x10;
  spit(bad, buf, size);
  buf[size / 2] ^= 0x10;
  refused(bad, HIDDEN, 0, AQ_ERROR_IO, "is corrupt: CRC-32");
  path_of(bad, sizeof(bad), "v2.ckpt");
  buf[8] = 2;
  spit(bad, buf, size);
  buf[8] = 1;
  refused(bad, HIDDEN, 0, AQ_ERROR_INCOMPATIBLE, "is format version 2; this Aquila reads version 1");
  path_of(bad, sizeof(bad), "long.ckpt");
  uint8_t *longer = calloc(1, size + 9);
  memcpy(longer, buf, size);
  spit(bad, longer, size + 9);
  free(longer);
  refused(bad, HIDDEN, 0, AQ_ERROR_IO, "longer than written");
  /* A record that lies about its length, under a valid CRC. */
  path_of(bad, sizeof(bad), "lying.ckpt");
  uint32_t len = 200;
  memcpy(buf + 40, &len, 4);
  rewrite_crc(buf, size);
  spit(bad, buf, size);
  refused(bad, HIDDEN, 0, AQ_ERROR_IO, "tensor record 0 is malformed");
  free(buf);
}

Test(checkpoint, checkpoints_of_another_graph_are_refused_by_tensor) {
  char path[128];
  size_t size;
  free(saved_file("extra.ckpt", HIDDEN, 1, path, sizeof(path), &size));
  refused(path, HIDDEN, 0, AQ_ERROR_INCOMPATIBLE, "holds tensor 'extra', which is not a tensor of the exec's graph");
  uint8_t *buf = saved_file("plain.ckpt", HIDDEN, 0, path, sizeof(path), &size);
  refused(path, HIDDEN, 1, AQ_ERROR_INCOMPATIBLE, "lacks tensor 'extra' of the exec's graph");
  refused(path, 10, 0, AQ_ERROR_INCOMPATIBLE,
          "holds tensor 'w1' as f32 [16, 12]; the exec's graph has f32 [16, 10]");
  /* w1 as i32, under a valid CRC: name length, name, then the dtype. */
  uint32_t i32 = AQ_DTYPE_I32;
  memcpy(buf + 40 + 4 + 2, &i32, 4);
  rewrite_crc(buf, size);
  spit(path, buf, size);
  refused(path, HIDDEN, 0, AQ_ERROR_INCOMPATIBLE, "holds tensor 'w1' as i32 [16, 12]; the exec's graph has f32");
  free(buf);
  net_t n;
  build(&n, HIDDEN, 0);
  cr_assert_eq(aq_exec_load(NULL, path), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_exec_load(n.e, NULL), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_exec_save(n.e, NULL), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_exec_save_with(n.e, path, NULL, 4), AQ_ERROR_INVALID_ARGUMENT);
  destroy(&n);
}

static _Atomic int released;

static aq_status_t hold(void *user, uint64_t a1, uint64_t a2, uint64_t a3) {
  (void)user, (void)a1, (void)a2, (void)a3;
  while (!released) usleep(1000);
  return AQ_OK;
}

Test(checkpoint, a_run_in_flight_is_neither_saved_nor_overwritten) {
  aq_graph_t *g;
  aq_tensor_t w, grad;
  aq_exec_t *e;
  AQ_ASSERT_OK(aq_graph_create(NULL, &g));
  AQ_ASSERT_OK(aq_tensor_create(g, "w", AQ_DTYPE_F32, AQ_ROLE_PARAMETER, 1, (int64_t[]){4}, &w));
  AQ_ASSERT_OK(aq_tensor_create(g, "grad", AQ_DTYPE_F32, AQ_ROLE_INPUT, 1, (int64_t[]){4}, &grad));
  AQ_ASSERT_OK(aq_tensor_init(g, w, &(aq_initializer_t){.kind = AQ_INIT_CONSTANT, .value = 1}));
  aq_host_task_t h = {.name = "hold", .fn = hold, .read_count = 1, .reads = {w}, .agent = -1};
  aq_task_t task;
  AQ_ASSERT_OK(aq_graph_add_host(g, &h, &task));
  AQ_ASSERT_OK(aq_op_sgd(g, w, grad, &(aq_sgd_options_t){.lr = 1}));
  AQ_ASSERT_OK(aq_graph_instantiate(g, NULL, &e));
  float ones[4] = {1, 1, 1, 1};
  AQ_ASSERT_OK(aq_exec_write(e, grad, ones, sizeof(ones)));
  char path[128];
  path_of(path, sizeof(path), "busy.ckpt");
  AQ_ASSERT_OK(aq_exec_save(e, path));
  released = 0;
  AQ_ASSERT_OK(aq_exec_run(e));
  cr_assert_eq(aq_exec_save(e, path), AQ_ERROR_BUSY);
  cr_assert(strstr(aq_last_error(), "a run is in flight"), "%s", aq_last_error());
  cr_assert_eq(aq_exec_load(e, path), AQ_ERROR_BUSY);
  released = 1;
  AQ_ASSERT_OK(aq_exec_wait(e, 30 * SEC));
  float back[4];
  AQ_ASSERT_OK(aq_exec_read(e, w, back, sizeof(back)));
  cr_assert_eq(back[0], 0.0f, "the run's update stands");
  AQ_ASSERT_OK(aq_exec_load(e, path));
  AQ_ASSERT_OK(aq_exec_read(e, w, back, sizeof(back)));
  cr_assert_eq(back[0], 1.0f, "loaded once the run is over");
  AQ_ASSERT_OK(aq_exec_destroy(e));
  AQ_ASSERT_OK(aq_graph_destroy(g));
}
