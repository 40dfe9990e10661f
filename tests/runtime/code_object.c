/* Code objects: loading, lookup, and every way a file can be wrong. */
#include <dirent.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(code_object, .init = setup, .fini = teardown);

static char *data_path(const char *name) {
  static char buf[1024];
  const char *dir = getenv("AQ_CODE_OBJECT_PATH");
  cr_assert(dir, "AQ_CODE_OBJECT_PATH is set by make test");
  char first[900];
  snprintf(first, sizeof(first), "%s", dir);
  char *colon = strchr(first, ':');
  if (colon) *colon = '\0';
  snprintf(buf, sizeof(buf), "%s/%s", first, name);
  return buf;
}

static unsigned char *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "%s", path);
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*size);
  cr_assert_eq(fread(b, 1, *size, f), *size);
  fclose(f);
  return b;
}

static const char *write_tmp(const char *tag, const void *bytes, size_t size) {
  static char path[256];
  snprintf(path, sizeof(path), "/tmp/aq-test-%d-%s.so", getpid(), tag);
  FILE *f = fopen(path, "wb");
  fwrite(bytes, 1, size, f);
  fclose(f);
  return path;
}

static aq_status_t load_expect(const char *path, aq_status_t want, const char *phrase) {
  aq_code_object_t co;
  aq_status_t s = aq_code_object_load(path, &co);
  if (!strncmp(path, "/tmp/aq-test-", 13)) unlink(path);
  cr_assert_eq(s, want, "%s: got %s: %s", path, aq_status_string(s), aq_last_error());
  cr_assert(strstr(aq_last_error(), phrase), "%s: message '%s' lacks '%s'", path, aq_last_error(), phrase);
  return s;
}

Test(code_object, loads_by_name_and_lists_kernels) {
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_code_object_info_t info;
  AQ_ASSERT_OK(aq_code_object_get_info(co, &info));
  cr_assert_str_eq(info.format, "cpu-elf");
  cr_assert_str_eq(info.producer, "aquila tests");
  cr_assert_eq(info.kernel_count, 12);
  aq_agent_t a = first_cpu_agent();
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "count", a, &k));
  cr_assert_str_eq(k.name, "count");
  cr_assert_eq(k.kernarg_size, sizeof(count_args_t));
  cr_assert_eq(k.kernarg_alignment, 8);
  AQ_ASSERT_OK(aq_code_object_kernel_at(co, 0, a, &k));
  cr_assert_str_eq(k.name, "noop");
  cr_assert_eq(aq_code_object_kernel_at(co, 12, a, &k), AQ_ERROR_NOT_FOUND);
  cr_assert_eq(aq_code_object_find_kernel(co, "nope", a, &k), AQ_ERROR_NOT_FOUND);
  cr_assert(strstr(aq_last_error(), "no kernel 'nope'"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_code_object_unload(co));
  cr_assert_eq(aq_code_object_unload(co), AQ_ERROR_INVALID_HANDLE);
}

Test(code_object, a_kernel_of_an_unloaded_object_is_not_dispatched) {
  aq_code_object_t co;
  aq_agent_t a = first_cpu_agent();
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_kernel_info_t k;
  AQ_ASSERT_OK(aq_code_object_find_kernel(co, "noop", a, &k));
  AQ_ASSERT_OK(aq_code_object_unload(co));
  aq_queue_t q;
  AQ_ASSERT_OK(aq_queue_create(a, NULL, &q));
  aq_signal_t done;
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  hsa_kernel_dispatch_packet_t p = dispatch_packet(&k, NULL, 1, 1, done);
  AQ_ASSERT_OK(aq_queue_submit(q, &p, SEC, NULL));
  cr_assert_eq(aq_signal_wait(done, AQ_SIGNAL_EQ, 0, 10 * SEC, NULL), AQ_ERROR_INVALID_PACKET);
  aq_signal_destroy(done);
  aq_queue_destroy(q);
}

Test(code_object, missing_file) {
  load_expect("no-such-kernels.so", AQ_ERROR_NOT_FOUND, "not found");
  load_expect("/nonexistent/dir/k.so", AQ_ERROR_NOT_FOUND, "/nonexistent/dir/k.so");
}

Test(code_object, truncated_file) {
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  load_expect(write_tmp("trunc40", b, 40), AQ_ERROR_INVALID_CODE_OBJECT, "truncated");
  load_expect(write_tmp("trunchalf", b, size / 2), AQ_ERROR_INVALID_CODE_OBJECT, "truncated");
  free(b);
}

Test(code_object, corrupt_and_foreign_files) {
  const char text[] = "this is not an ELF file, just some text\n";
  load_expect(write_tmp("text", text, sizeof(text)), AQ_ERROR_INVALID_CODE_OBJECT, "no known code-object format");
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  unsigned char *c = malloc(size);
  memcpy(c, b, size);
  Elf64_Ehdr *eh = (Elf64_Ehdr *)c;
  eh->e_phoff = size + 4096; /* program headers past the end */
  load_expect(write_tmp("phoff", c, size), AQ_ERROR_INVALID_CODE_OBJECT, "truncated");
  memcpy(c, b, size);
  ((Elf64_Ehdr *)c)->e_type = ET_EXEC;
  load_expect(write_tmp("exec", c, size), AQ_ERROR_INVALID_CODE_OBJECT, "not a shared object");
  memcpy(c, b, size);
  c[EI_CLASS] = ELFCLASS32;
  load_expect(write_tmp("class32", c, size), AQ_ERROR_INCOMPATIBLE, "32-bit");
  /* A real shared object that is not an Aquila code object. */
  load_expect("not-aquila.so", AQ_ERROR_INVALID_CODE_OBJECT, "not an Aquila code object");
  free(b);
  free(c);
}

Test(code_object, wrong_architecture) {
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  ((Elf64_Ehdr *)b)->e_machine = EM_AARCH64;
  load_expect(write_tmp("aarch64", b, size), AQ_ERROR_INCOMPATIBLE, "AArch64");
  free(b);
}

/* An AMD GPU code object is told apart from a foreign CPU one: no agent
 * here can run it, and the message says so. */
Test(code_object, an_hsaco_without_an_amd_gpu) {
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  ((Elf64_Ehdr *)b)->e_machine = 224; /* EM_AMDGPU */
  load_expect(write_tmp("amdgpu", b, size), AQ_ERROR_UNAVAILABLE, "AMD GPU code object (hsaco), and no ROCr agent");
  free(b);
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_code_object_unload(co);
}

/* The op table beside the kernel table: what the scheduler is told. */
Test(code_object, an_op_table_is_read_and_its_absence_said) {
  aq_code_object_t co, bare;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  const aq_op_table_t *t = NULL;
  AQ_ASSERT_OK(aq_code_object_op_table(co, &t));
  cr_assert_eq(t->op_count, 1);
  cr_assert_str_eq(t->ops[0].kernel, "descend");
  cr_assert_eq(t->ops[0].flags, AQ_OP_OPTIMIZER);
  cr_assert_eq(t->ops[0].lr_offset, 16);
  AQ_ASSERT_OK(aq_code_object_load("test-kernels-no-ops.so", &bare));
  cr_assert_eq(aq_code_object_op_table(bare, &t), AQ_ERROR_NOT_FOUND);
  cr_assert(strstr(aq_last_error(), "ships no op table"), "%s", aq_last_error());
  cr_assert_eq(aq_code_object_op_table(co, NULL), AQ_ERROR_INVALID_ARGUMENT);
  AQ_ASSERT_OK(aq_code_object_unload(bare));
  AQ_ASSERT_OK(aq_code_object_unload(co));
  cr_assert_eq(aq_code_object_op_table(co, &t), AQ_ERROR_INVALID_HANDLE);
}

/* An op table the scheduler could not trust is refused at load, by name. */
Test(code_object, an_op_table_that_lies_is_refused_by_name) {
  load_expect("test-kernels-bad-ops.so", AQ_ERROR_INVALID_CODE_OBJECT, "'no_such_kernel', which the kernel table lacks");
  load_expect("test-kernels-bad-lr.so", AQ_ERROR_INVALID_CODE_OBJECT,
              "op 'descend': learning-rate offset 24 does not fit its 24 bytes");
  /* a fusion flag from a newer library (AQ_OP_FUSE_KEEPS_OTHER_OUTPUTS and
   * AQ_OP_FUSE_ON_CPUS are known) */
  load_expect("test-kernels-bad-fusion.so", AQ_ERROR_INVALID_CODE_OBJECT,
              "fusion 'count' has flags 0x80 this runtime does not know");
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  AQ_ASSERT_OK(aq_code_object_unload(co));
}

Test(code_object, wrong_version) {
  load_expect("test-kernels-v99.so", AQ_ERROR_INCOMPATIBLE, "version 99");
  /* And the runtime still loads good ones afterwards. */
  aq_code_object_t co;
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_code_object_unload(co);
}

Test(code_object, bad_arguments) {
  aq_code_object_t co;
  cr_assert_eq(aq_code_object_load(NULL, &co), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_code_object_load("", &co), AQ_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(aq_code_object_get_info((aq_code_object_t){99}, &(aq_code_object_info_t){0}),
               AQ_ERROR_INVALID_HANDLE);
}

/* A search path longer than any buffer: searched, not overflowed. */
Test(code_object, a_very_long_search_path_is_searched_safely) {
  const char *old = getenv("AQ_CODE_OBJECT_PATH");
  char *saved = old ? strdup(old) : NULL;
  size_t n = 20000;
  char *path = malloc(n + 1);
  for (size_t i = 0; i < n; ++i) path[i] = i % 700 == 0 ? ':' : (i % 700 == 1 ? '/' : 'd');
  path[n] = '\0';
  setenv("AQ_CODE_OBJECT_PATH", path, 1);
  aq_code_object_t co;
  aq_status_t s = aq_code_object_load("no-such-kernels.so", &co);
  if (saved) setenv("AQ_CODE_OBJECT_PATH", saved, 1);
  free(saved);
  free(path);
  cr_assert_eq(s, AQ_ERROR_NOT_FOUND, "%s", aq_last_error());
  cr_assert(strstr(aq_last_error(), "not found"), "%s", aq_last_error());
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_code_object_unload(co);
}

/* Only regular files are code objects, and the message says what it was. */
Test(code_object, directories_devices_and_fifos_are_named_as_such) {
  load_expect("/tmp", AQ_ERROR_INVALID_CODE_OBJECT, "a directory");
  load_expect("/dev/zero", AQ_ERROR_INVALID_CODE_OBJECT, "a character device");
  char fifo[128];
  snprintf(fifo, sizeof(fifo), "/tmp/aq-fifo-%d", getpid());
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  aq_code_object_t co;
  aq_status_t s = aq_code_object_load(fifo, &co);
  unlink(fifo);
  cr_assert_eq(s, AQ_ERROR_INVALID_CODE_OBJECT, "%s", aq_last_error());
  cr_assert(strstr(aq_last_error(), "a FIFO"), "%s", aq_last_error());
}

/* A huge file is recognised (or not) by its first bytes. */
Test(code_object, a_huge_file_is_refused_by_its_header) {
  char path[128];
  snprintf(path, sizeof(path), "/tmp/aq-test-%d-huge.so", getpid());
  FILE *f = fopen(path, "wb");
  fputs("no code object here", f);
  fclose(f);
  cr_assert_eq(truncate(path, (off_t)3 << 30), 0); /* sparse: 3 GiB on no disk */
  load_expect(path, AQ_ERROR_INVALID_CODE_OBJECT, "no known code-object format");
}

/* Code that anybody may rewrite or replace is not loaded. */
Test(code_object, world_writable_files_and_directories_are_refused) {
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  const char *p = write_tmp("ww", b, size);
  chmod(p, 0666);
  load_expect(p, AQ_ERROR_INVALID_CODE_OBJECT, "world-writable");
  char dir[] = "/tmp/aq-test-dir-XXXXXX";
  cr_assert(mkdtemp(dir));
  chmod(dir, 0777);
  char file[128];
  snprintf(file, sizeof(file), "%s/k.so", dir);
  FILE *f = fopen(file, "wb");
  fwrite(b, 1, size, f);
  fclose(f);
  chmod(file, 0644);
  aq_code_object_t co;
  aq_status_t s = aq_code_object_load(file, &co);
  cr_assert_eq(s, AQ_ERROR_INVALID_CODE_OBJECT, "%s", aq_last_error());
  cr_assert(strstr(aq_last_error(), "world-writable directory"), "%s", aq_last_error());
  chmod(dir, 01777); /* with the sticky bit, as /tmp: loaded */
  AQ_ASSERT_OK(aq_code_object_load(file, &co));
  aq_code_object_unload(co);
  unlink(file);
  rmdir(dir);
  free(b);
}

/* A foreign shared object is refused from its file: its constructor (which
 * would leave a mark) never runs. */
Test(code_object, a_foreign_object_is_refused_without_running_it) {
  char mark[128];
  snprintf(mark, sizeof(mark), "/tmp/aq-test-%d-ctor-ran", getpid());
  unlink(mark);
  setenv("AQ_TEST_CONSTRUCTOR_MARK", mark, 1);
  load_expect("not-aquila.so", AQ_ERROR_INVALID_CODE_OBJECT, "not an Aquila code object");
  unsetenv("AQ_TEST_CONSTRUCTOR_MARK");
  cr_assert_neq(access(mark, F_OK), 0, "the foreign object's constructor ran");
}

/* The table's header in the file: magic, version, isa, kernel count. */
static size_t table_offset(const unsigned char *b, size_t size) {
  for (size_t i = 0; i + 16 <= size; i += 4) {
    uint32_t w[2];
    memcpy(w, b + i, 8);
    if (w[0] == AQ_CODE_OBJECT_MAGIC && w[1] == AQ_CODE_OBJECT_VERSION) return i;
  }
  cr_assert_fail("no kernel table in the file");
  return 0;
}

Test(code_object, a_table_that_lies_about_its_kernel_count_is_refused) {
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  size_t t = table_offset(b, size);
  uint32_t count = 1000000;
  memcpy(b + t + 12, &count, 4);
  load_expect(write_tmp("count1m", b, size), AQ_ERROR_INVALID_CODE_OBJECT, "1000000 kernels");
  count = 5000;
  memcpy(b + t + 12, &count, 4);
  load_expect(write_tmp("count5k", b, size), AQ_ERROR_INVALID_CODE_OBJECT, "lies outside the object");
  free(b);
}

/* A dynamic section whose tables point outside the file is refused before
 * the dynamic loader follows it. */
Test(code_object, a_corrupt_dynamic_section_is_refused) {
  size_t size;
  unsigned char *b = slurp(data_path("test-kernels.so"), &size);
  Elf64_Ehdr eh;
  memcpy(&eh, b, sizeof(eh));
  int patched = 0;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, b + eh.e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_type != PT_DYNAMIC) continue;
    for (size_t o = ph.p_offset; o + sizeof(Elf64_Dyn) <= ph.p_offset + ph.p_filesz; o += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      memcpy(&d, b + o, sizeof(d));
      if (d.d_tag == DT_STRTAB || d.d_tag == DT_SYMTAB) {
        d.d_un.d_ptr = 0x7fffffff0000ull;
        memcpy(b + o, &d, sizeof(d));
        patched++;
      }
    }
  }
  cr_assert_eq(patched, 2);
  load_expect(write_tmp("dynamic", b, size), AQ_ERROR_INVALID_CODE_OBJECT, "corrupt");
  free(b);
}

/* The code-object fuzzer's findings, and hand-made hostile files: each is a
 * clean error (make fuzz-code-object seeds from them). */
Test(code_object, every_hostile_file_of_the_corpus_is_a_clean_error) {
  const char *dir = "tests/co-corpus";
  DIR *d = opendir(dir);
  cr_assert(d, "%s: run from the repository root", dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    aq_code_object_t co;
    aq_status_t s = aq_code_object_load(path, &co);
    cr_assert(s == AQ_ERROR_INVALID_CODE_OBJECT || s == AQ_ERROR_INCOMPATIBLE, "%s: %s: %s", path,
              aq_status_string(s), aq_last_error());
    n++;
  }
  closedir(d);
  cr_assert_geq(n, 3);
}
