/* The rocr driver (AMD GPUs through ROCr), on machines with no AMD GPU.
 *
 * NEVER RUN ON AMD HARDWARE: no machine we have has /dev/kfd, so hsa_init
 * fails everywhere these tests run. They cover that path (the error in
 * aq_driver_status and aq-info, no rocr agent, a clear error for an hsaco,
 * the runtime working on afterwards) and the driver's pure parts
 * (runtime/drivers/rocr_packet.c, linked in directly): packet forwarding into
 * a ring, the in-flight signal table, hsaco kernel descriptors, all on CPU
 * memory. Hardware queues, ROCr signals and async handlers, memory pools,
 * SVM and executables have never executed anywhere. */
#include <elf.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "runtime/drivers/rocr_packet.h"

static void setup(void) { AQ_ASSERT_OK(aq_init(NULL)); }
static void teardown(void) { aq_shut_down(); }
TestSuite(rocr, .init = setup, .fini = teardown);
TestSuite(rocr_packet);

static int have_kfd(void) { return access("/dev/kfd", F_OK) == 0; }

Test(rocr, no_kfd_no_agent_and_says_why) {
  if (have_kfd()) cr_skip_test("/dev/kfd exists: this machine may have an AMD GPU");
  const char *msg = NULL;
  AQ_ASSERT_OK(aq_driver_status("rocr", &msg));
  /* With ROCr installed (as here) hsa_init is what fails; without it, dlopen. */
  cr_assert(strstr(msg, "hsa_init failed, no /dev/kfd") || strstr(msg, "no HSA runtime"), "rocr: '%s'", msg);
  if (strstr(msg, "hsa_init")) cr_assert(strstr(msg, "HSA_STATUS_ERROR"), "hsa_init's status is named: '%s'", msg);
  aq_agent_t agents[64];
  size_t n = 0;
  AQ_ASSERT_OK(aq_agents(agents, 64, &n));
  for (size_t i = 0; i < n; ++i) {
    aq_agent_info_t info;
    AQ_ASSERT_OK(aq_agent_get_info(agents[i], &info));
    cr_assert_str_neq(info.driver, "rocr", "agent %s is offered by rocr", info.name);
  }
}

/* aq-info (BUILD/bin, beside this program's BUILD/tests) prints the same reason. */
Test(rocr, aq_info_says_why) {
  if (have_kfd()) cr_skip_test("/dev/kfd exists");
  const char *msg = NULL;
  AQ_ASSERT_OK(aq_driver_status("rocr", &msg));
  char exe[1024] = "", cmd[1200], line[1024];
  cr_assert(readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0);
  snprintf(cmd, sizeof(cmd), "%s/bin/aq-info 2>&1", dirname(dirname(exe)));
  FILE *f = popen(cmd, "r");
  cr_assert(f, "%s", cmd);
  int found = 0;
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, "  rocr ", 7)) {
      found = 1;
      cr_assert(strstr(line, msg), "aq-info's rocr line '%s' lacks '%s'", line, msg);
    }
  cr_assert_eq(pclose(f), 0, "%s failed", cmd);
  cr_assert(found, "aq-info printed no rocr line");
}

/* A small but well-formed hsaco: an AMDGPU shared object whose .rodata
 * (at address 0x1000, file offset 128) holds two kernel descriptors, with
 * a symbol table naming them "vadd.kd" and "scale.kd", plus a function
 * symbol and a short object that are not kernels. */
enum { KD_OFF = 128, STR_OFF = 256, SYM_OFF = 304, SHSTR_OFF = 424, SH_OFF = 480, HSACO_SIZE = SH_OFF + 5 * 64 };
static size_t make_hsaco(uint64_t *words) {
  uint8_t *b = (uint8_t *)words;
  memset(b, 0, HSACO_SIZE);
  Elf64_Ehdr eh = {.e_type = ET_DYN, .e_machine = EM_AMDGPU, .e_version = EV_CURRENT, .e_phoff = 64,
                   .e_shoff = SH_OFF, .e_ehsize = 64, .e_phentsize = sizeof(Elf64_Phdr), .e_phnum = 1,
                   .e_shentsize = sizeof(Elf64_Shdr), .e_shnum = 5, .e_shstrndx = 4};
  memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64, eh.e_ident[EI_DATA] = ELFDATA2LSB, eh.e_ident[EI_VERSION] = EV_CURRENT;
  memcpy(b, &eh, sizeof(eh));
  Elf64_Phdr ph = {.p_type = PT_LOAD, .p_offset = 0, .p_filesz = HSACO_SIZE, .p_memsz = HSACO_SIZE};
  memcpy(b + 64, &ph, sizeof(ph));
  uint32_t kd[2][3] = {{256, 16, 24}, {0, 0, 8}}; /* group, private, kernarg */
  memcpy(b + KD_OFF, kd[0], 12);
  memcpy(b + KD_OFF + 64, kd[1], 12);
  static const char str[] = "\0vadd.kd\0scale.kd\0vadd\0small.kd"; /* offsets 1, 9, 18, 23 */
  memcpy(b + STR_OFF, str, sizeof(str));
  Elf64_Sym syms[5] = {{0},
                       {.st_name = 1, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), .st_shndx = 1, .st_value = 0x1000, .st_size = 64},
                       {.st_name = 9, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), .st_shndx = 1, .st_value = 0x1040, .st_size = 64},
                       {.st_name = 18, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC), .st_shndx = 1, .st_value = 0x1000, .st_size = 64},
                       {.st_name = 23, .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_OBJECT), .st_shndx = 1, .st_value = 0x1000, .st_size = 8}};
  memcpy(b + SYM_OFF, syms, sizeof(syms));
  static const char shstr[] = "\0.rodata\0.strtab\0.symtab\0.shstrtab"; /* 1, 9, 17, 25 */
  memcpy(b + SHSTR_OFF, shstr, sizeof(shstr));
  Elf64_Shdr sh[5] = {{0},
                      {.sh_name = 1, .sh_type = SHT_PROGBITS, .sh_addr = 0x1000, .sh_offset = KD_OFF, .sh_size = 128},
                      {.sh_name = 9, .sh_type = SHT_STRTAB, .sh_offset = STR_OFF, .sh_size = sizeof(str)},
                      {.sh_name = 17, .sh_type = SHT_SYMTAB, .sh_offset = SYM_OFF, .sh_size = sizeof(syms), .sh_link = 2,
                       .sh_entsize = sizeof(Elf64_Sym)},
                      {.sh_name = 25, .sh_type = SHT_STRTAB, .sh_offset = SHSTR_OFF, .sh_size = sizeof(shstr)}};
  memcpy(b + SH_OFF, sh, sizeof(sh));
  return HSACO_SIZE;
}

/* Loading an hsaco names the file and why nothing can run it; the runtime
 * then runs CPU work as before. */
Test(rocr, hsaco_without_agent_then_cpu_dispatch) {
  if (have_kfd()) cr_skip_test("/dev/kfd exists");
  uint64_t words[HSACO_SIZE / 8];
  size_t size = make_hsaco(words);
  char path[128];
  snprintf(path, sizeof(path), "/tmp/aq-rocr-%d.hsaco", getpid());
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(words, 1, size, f) == size);
  fclose(f);
  aq_code_object_t co;
  aq_status_t s = aq_code_object_load(path, &co);
  unlink(path);
  cr_assert_eq(s, AQ_ERROR_UNAVAILABLE, "%s: %s", aq_status_string(s), aq_last_error());
  const char *msg = NULL;
  AQ_ASSERT_OK(aq_driver_status("rocr", &msg));
  char want[600];
  snprintf(want, sizeof(want), "%s: an AMD GPU code object (hsaco), and no ROCr agent here (rocr: %s)", path, msg);
  cr_assert_str_eq(aq_last_error(), want);

  aq_agent_t cpu = first_cpu_agent();
  AQ_ASSERT_OK(aq_code_object_load("test-kernels.so", &co));
  aq_queue_t q;
  aq_signal_t done;
  AQ_ASSERT_OK(aq_queue_create(cpu, NULL, &q));
  AQ_ASSERT_OK(aq_signal_create(1, &done));
  _Atomic uint32_t hits[64] = {0};
  count_args_t args = {hits};
  AQ_ASSERT_OK(dispatch_and_wait(co, cpu, q, done, "count", &args, (aq_dispatch_shape_t){{64, 1, 1}, {16, 1, 1}}));
  for (int i = 0; i < 64; ++i) cr_assert_eq(hits[i], 1, "work-item %d ran %u times", i, hits[i]);
  AQ_ASSERT_OK(aq_signal_destroy(done));
  AQ_ASSERT_OK(aq_queue_destroy(q));
  AQ_ASSERT_OK(aq_code_object_unload(co));
}

Test(rocr_packet, hsaco_kernel_descriptors) {
  uint64_t words[HSACO_SIZE / 8];
  size_t size = make_hsaco(words);
  rocr_kd_t kds[4];
  cr_assert_eq(aq_rocr_hsaco_kernels(words, size, kds, 4), 2);
  cr_assert_str_eq(kds[0].name, "vadd");
  cr_assert_eq(kds[0].group_size, 256);
  cr_assert_eq(kds[0].private_size, 16);
  cr_assert_eq(kds[0].kernarg_size, 24);
  cr_assert_str_eq(kds[1].name, "scale");
  cr_assert_eq(kds[1].kernarg_size, 8);
  cr_assert_eq(aq_rocr_hsaco_kernels(words, size, NULL, 0), 2, "counting needs no room");
  uint8_t *odd = malloc(size + 1);
  memcpy(odd + 1, words, size);
  cr_assert_eq(aq_rocr_hsaco_kernels(odd + 1, size, kds, 4), 2, "any alignment");
  free(odd);
  /* Truncated before its section headers, a descriptor past its section,
   * a symbol table linked to no string table: malformed, not a crash. */
  cr_assert_eq(aq_rocr_hsaco_kernels(words, SH_OFF + 100, kds, 4), -1);
  Elf64_Sym *vadd = (Elf64_Sym *)((uint8_t *)words + SYM_OFF) + 1;
  vadd->st_value = 0x1070;
  cr_assert_eq(aq_rocr_hsaco_kernels(words, size, kds, 4), -1);
  make_hsaco(words);
  ((Elf64_Shdr *)((uint8_t *)words + SH_OFF))[3].sh_link = 9;
  cr_assert_eq(aq_rocr_hsaco_kernels(words, size, kds, 4), -1);
  cr_assert_eq(aq_rocr_hsaco_kernels("\177ELF", 4, kds, 4), -1);
}

static uint8_t ring[4][64] __attribute__((aligned(64)));

Test(rocr_packet, dispatch_forwarded_unchanged_but_signal_and_kernarg) {
  hsa_kernel_dispatch_packet_t p;
  memset(&p, 0, sizeof(p));
  p.header = aq_packet_header(HSA_PACKET_TYPE_KERNEL_DISPATCH, 1, HSA_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_SYSTEM);
  p.setup = 3 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
  p.workgroup_size_x = 64, p.workgroup_size_y = 2, p.workgroup_size_z = 1;
  p.grid_size_x = 4096, p.grid_size_y = 8, p.grid_size_z = 3;
  p.private_segment_size = 0, p.group_segment_size = 1024;
  p.kernel_object = 0xabcdef00;
  uint64_t args[3] = {1, 2, 3}, copy[3];
  p.kernarg_address = args;
  p.completion_signal.handle = 0x500000001ull; /* an Aquila handle */
  for (int i = 0; i < 4; ++i) *(uint32_t *)ring[i] = HSA_PACKET_TYPE_INVALID;
  rocr_patch_t patch = {.completion = 0x7777, .kernarg = copy, .min_group = 512, .min_private = 48};
  aq_rocr_packet_forward(&p, ring[2], &patch);
  hsa_kernel_dispatch_packet_t out;
  memcpy(&out, ring[2], sizeof(out));
  cr_assert_eq(out.header, p.header);
  cr_assert_eq(out.setup, p.setup);
  cr_assert_eq(out.workgroup_size_x, 64);
  cr_assert_eq(out.workgroup_size_y, 2);
  cr_assert_eq(out.grid_size_x, 4096);
  cr_assert_eq(out.grid_size_y, 8);
  cr_assert_eq(out.grid_size_z, 3);
  cr_assert_eq(out.kernel_object, 0xabcdef00);
  cr_assert_eq(out.group_segment_size, 1024, "the packet's larger ask stands");
  cr_assert_eq(out.private_segment_size, 48, "raised to the kernel's fixed need");
  cr_assert_eq(out.kernarg_address, copy);
  cr_assert_eq(out.completion_signal.handle, 0x7777);
  cr_assert_eq(*(uint32_t *)ring[1], HSA_PACKET_TYPE_INVALID, "neighbours untouched");
  cr_assert_eq(*(uint32_t *)ring[3], HSA_PACKET_TYPE_INVALID);
  /* No kernarg copy (a kernel without arguments): the address stays. */
  patch.kernarg = NULL;
  aq_rocr_packet_forward(&p, ring[0], &patch);
  cr_assert_eq(((hsa_kernel_dispatch_packet_t *)ring[0])->kernarg_address, args);
}

Test(rocr_packet, barrier_deps_replaced) {
  hsa_barrier_or_packet_t b;
  memset(&b, 0, sizeof(b));
  b.header = aq_packet_header(HSA_PACKET_TYPE_BARRIER_OR, 1, HSA_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
  for (int i = 0; i < 5; ++i) b.dep_signal[i].handle = 0x100000001ull + (uint64_t)i;
  b.completion_signal.handle = 0x900000001ull;
  rocr_patch_t patch = {.completion = 0x42, .deps = {0xa, 0, 0, 0xb, 0}};
  aq_rocr_packet_forward(&b, ring[1], &patch);
  hsa_barrier_or_packet_t out;
  memcpy(&out, ring[1], sizeof(out));
  cr_assert_eq(out.header, b.header);
  for (int i = 0; i < 5; ++i) cr_assert_eq(out.dep_signal[i].handle, patch.deps[i], "dep %d", i);
  cr_assert_eq(out.completion_signal.handle, 0x42);
}

Test(rocr_packet, inflight_table) {
  static rocr_inflight_table_t t;
  memset(&t, 0, sizeof(t));
  t.count = 4;
  int e[4];
  for (int i = 0; i < 4; ++i) {
    e[i] = aq_rocr_inflight_acquire(&t, 0x10 + (uint64_t)(i == 3 ? 0 : i)); /* entries 0 and 3 share a signal */
    cr_assert_geq(e[i], 0);
    for (int j = 0; j < i; ++j) cr_assert_neq(e[i], e[j]);
  }
  cr_assert_eq(aq_rocr_inflight_acquire(&t, 0x99), -1, "full");
  cr_assert_eq(aq_rocr_inflight_busy(&t), 4);
  cr_assert_eq(aq_rocr_inflight_find(&t, 0x11), e[1]);
  cr_assert_eq(aq_rocr_inflight_find(&t, 0x10), -1, "two packets decide it: not one signal's to map");
  cr_assert_eq(aq_rocr_inflight_find(&t, 0x55), -1);
  /* The GPU's completion and a queue error race: one of them wins. */
  cr_assert_eq(aq_rocr_inflight_claim(&t, e[1]), 1);
  cr_assert_eq(aq_rocr_inflight_claim(&t, e[1]), 0);
  cr_assert_eq(aq_rocr_inflight_find(&t, 0x11), -1, "claimed: no longer in flight");
  /* Barrier e[2] waits on e[1]'s signal: e[1] is not reused until e[2] ends. */
  aq_rocr_inflight_hold(&t, e[2], e[1]);
  aq_rocr_inflight_release(&t, e[1]);
  cr_assert_eq(aq_rocr_inflight_busy(&t), 3);
  cr_assert_eq(aq_rocr_inflight_acquire(&t, 0x99), -1, "free but held");
  cr_assert_eq(aq_rocr_inflight_claim(&t, e[2]), 1);
  aq_rocr_inflight_release(&t, e[2]);
  int a = aq_rocr_inflight_acquire(&t, 0x99), c = aq_rocr_inflight_acquire(&t, 0x98);
  cr_assert(a >= 0 && c >= 0 && a != c);
  cr_assert((a == e[1] || a == e[2]) && (c == e[1] || c == e[2]));
  cr_assert_eq(t.e[a].aq_signal, 0x99);
}

/* Two completers race for every entry (ROCr's handler thread and a queue
 * error): each entry's Aquila signal is completed exactly once. */
static rocr_inflight_table_t race_table;
static _Atomic int race_wins[2];
static void *race_claim(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int i = 0; i < ROCR_INFLIGHT_MAX; ++i)
    if (aq_rocr_inflight_claim(&race_table, i)) atomic_fetch_add(&race_wins[me], 1);
  return NULL;
}

Test(rocr_packet, claim_race_completes_once) {
  for (int round = 0; round < 200; ++round) {
    memset(&race_table, 0, sizeof(race_table));
    race_table.count = ROCR_INFLIGHT_MAX;
    for (int i = 0; i < ROCR_INFLIGHT_MAX; ++i) cr_assert_geq(aq_rocr_inflight_acquire(&race_table, 1), 0);
    race_wins[0] = race_wins[1] = 0;
    pthread_t t[2];
    for (intptr_t k = 0; k < 2; ++k) pthread_create(&t[k], NULL, race_claim, (void *)k);
    for (int k = 0; k < 2; ++k) pthread_join(t[k], NULL);
    cr_assert_eq(race_wins[0] + race_wins[1], ROCR_INFLIGHT_MAX, "round %d", round);
  }
}
