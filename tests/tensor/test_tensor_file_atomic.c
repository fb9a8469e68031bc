/* The write path of safetensors files under failure: missing and unwritable folders, a
 * rename that cannot happen, a write error half-way (file size limit), a full disk (a small
 * tmpfs, where the system allows mounting one), and a process killed while writing. In each
 * case the previous file must survive byte for byte and no temporary file may be left behind
 * (except after SIGKILL, which no code can clean up after).
 *
 * Cases that need another user, a resource limit or a mount run in a child process, so the
 * test program itself keeps its privileges and limits. */
#define _GNU_SOURCE

#include "tensor_file_support.h"

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define CHILD_SKIPPED 77

/* Runs body(ctx) in a child process. Returns the child's exit code: 0 when all of its checks
 * passed, CHILD_SKIPPED when it could not set up what it needed, else a failure. */
static int run_in_child(void (*body)(void *), void *ctx)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        int failed_before = test_checks_failed;
        body(ctx);
        fflush(NULL);
        _exit(test_checks_failed > failed_before ? 1 : 0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static _Noreturn void skip_child(const char *why)
{
    printf("       skipped: %s\n", why);
    fflush(NULL);
    _exit(CHILD_SKIPPED);
}

static void check_child(int code, const char *what)
{
    CHECK(code == 0 || code == CHILD_SKIPPED, "%s: child exited with %d", what, code);
}

/* ---- a previous checkpoint and a write that must fail without touching it ------------ */

typedef struct target {
    char folder[600];
    char path[700];
    char temp_prefix[720]; /* "<name>.tmp." */
    unsigned char *old_bytes;
    size_t old_size;
} target;

static void target_init(target *t, const char *folder_name, const char *file_name)
{
    snprintf(t->folder, sizeof t->folder, "%s", test_scratch_path(folder_name));
    snprintf(t->path, sizeof t->path, "%s/%s", t->folder, file_name);
    snprintf(t->temp_prefix, sizeof t->temp_prefix, "%s.tmp.", file_name);
    t->old_bytes = NULL;
    t->old_size = 0;
    if (mkdir(t->folder, 0755) != 0 && errno != EEXIST)
        perror(t->folder);
}

/* Writes a small valid file at t->path and remembers its bytes. */
static void target_write_old(target *t)
{
    float values[64];
    test_fill_uniform(values, 64, -1.0f, 1.0f, 11);
    attn_named_tensor old = {"weights", ATTN_DTYPE_F32, 2, {8, 8}, values};
    attn_metadata_entry meta = {"epoch", "1"};
    CHECK_OK(attn_tensor_file_write(t->path, &old, 1, &meta, 1));
    free(t->old_bytes);
    t->old_bytes = read_bytes(t->path, &t->old_size);
    CHECK(t->old_bytes != NULL, "the old file is readable");
}

static int target_old_file_intact(const target *t)
{
    size_t size = 0;
    unsigned char *bytes = read_bytes(t->path, &size);
    int same = bytes != NULL && t->old_bytes != NULL && size == t->old_size &&
               memcmp(bytes, t->old_bytes, size) == 0;
    free(bytes);
    return same;
}

/* A 1 MiB tensor: larger than the limits and the small file systems below. */
static attn_status write_big(const char *path)
{
    static float big[1 << 18];
    attn_named_tensor t = {"big", ATTN_DTYPE_F32, 2, {512, 512}, big};
    attn_metadata_entry meta = {"epoch", "2"};
    return attn_tensor_file_write(path, &t, 1, &meta, 1);
}

/* The big write fails with ATTN_ERR_IO for reason `error`, naming the path; the old file is
 * as it was and the folder holds no temporary file. */
static void check_failed_write_kept_old_file(const target *t, int error)
{
    CHECK_FAILS(write_big(t->path), ATTN_ERR_IO);
    const char *message = attn_last_error();
    CHECK(strstr(message, t->path) != NULL && strstr(message, strerror(error)) != NULL,
          "message names the path and says '%s': %s", strerror(error), message);
    CHECK(target_old_file_intact(t), "the old file at %s is untouched", t->path);
    CHECK(count_entries(t->folder, t->temp_prefix) == 0, "no temporary file is left in %s",
          t->folder);
}

/* ---- folders that cannot take the file ---------------------------------------------- */

static void test_missing_folder_is_io_error(void)
{
    const char *path = test_scratch_path("no_such_folder/model.safetensors");
    float x = 1.0f;
    attn_named_tensor t = {"x", ATTN_DTYPE_F32, 0, {0}, &x};
    CHECK_FAILS(attn_tensor_file_write(path, &t, 1, NULL, 0), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), path) && strstr(attn_last_error(), strerror(ENOENT)),
          "names the path and the reason: %s", attn_last_error());
    CHECK(!path_exists(path), "nothing created");

    char through_file[700];
    write_bytes(test_scratch_path("plain_file"), "x", 1);
    snprintf(through_file, sizeof through_file, "%s/model.safetensors",
             test_scratch_path("plain_file"));
    CHECK_FAILS(attn_tensor_file_write(through_file, &t, 1, NULL, 0), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), strerror(ENOTDIR)) != NULL, "a file as a folder: %s",
          attn_last_error());
}

/* As root, permission bits do not stop writes, so the child becomes the unprivileged user
 * "nobody" (65534) for whom the root-owned folder is read-only; otherwise the child removes
 * its own write permission from the folder. */
static void unwritable_folder_body(void *ctx)
{
    target *t = ctx;
    if (geteuid() == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            skip_child("cannot switch from root to an unprivileged user");
    } else if (chmod(t->folder, 0555) != 0) {
        skip_child("cannot make the folder read-only");
    }
    if (access(t->folder, W_OK) == 0)
        skip_child("the folder stays writable for this user");
    check_failed_write_kept_old_file(t, EACCES);
}

static void test_unwritable_folder_keeps_old_file(void)
{
    target t;
    target_init(&t, "read_only", "model.safetensors");
    target_write_old(&t);
    chmod(test_scratch_folder(), 0755); /* "nobody" must reach the folder to fail writing in it */
    chmod(t.path, 0644);
    check_child(run_in_child(unwritable_folder_body, &t), "unwritable folder");
    chmod(t.folder, 0755);
    CHECK(target_old_file_intact(&t), "the old file is still intact");
    free(t.old_bytes);
}

/* rename() cannot replace a folder with a file: the failure comes after the data was
 * written, synced and closed, so this exercises the last cleanup path. */
static void test_failed_rename_leaves_everything_in_place(void)
{
    const char *occupied = test_scratch_path("occupied.safetensors");
    mkdir(occupied, 0755);
    char inside[700];
    snprintf(inside, sizeof inside, "%s/keep.txt", occupied);
    write_bytes(inside, "keep", 4);
    CHECK_FAILS(write_big(occupied), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "renaming") && strstr(attn_last_error(), occupied),
          "says the rename failed: %s", attn_last_error());
    size_t size = 0;
    unsigned char *kept = read_bytes(inside, &size);
    CHECK(kept && size == 4 && memcmp(kept, "keep", 4) == 0, "the folder's content survives");
    free(kept);
    CHECK(count_entries(test_scratch_folder(), "occupied.safetensors.tmp.") == 0,
          "no temporary file is left");
}

/* ---- the disk refusing data half-way -------------------------------------------------- */

/* A file size limit makes write() fail with EFBIG once the temporary file reaches 64 KiB:
 * the same path through fwrite/fflush as a full disk, available to any user. */
static void file_size_limit_body(void *ctx)
{
    signal(SIGXFSZ, SIG_IGN); /* get EFBIG from write() instead of being killed */
    struct rlimit limit = {64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0)
        skip_child("cannot lower the file size limit");
    check_failed_write_kept_old_file(ctx, EFBIG);
}

static void test_write_error_midway_keeps_old_file(void)
{
    target t;
    target_init(&t, "size_limited", "model.safetensors");
    target_write_old(&t);
    check_child(run_in_child(file_size_limit_body, &t), "file size limit");
    CHECK(target_old_file_intact(&t), "the old file is still intact");
    free(t.old_bytes);
}

/* A real full disk: a 256 KiB tmpfs mounted over the folder in a private mount namespace
 * (invisible outside the child, gone when it exits). Needs CAP_SYS_ADMIN; skipped without. */
static void full_disk_body(void *ctx)
{
    target *t = ctx;
    if (unshare(CLONE_NEWNS) != 0)
        skip_child("no permission to make a private mount namespace for a small tmpfs");
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("attn_test", t->folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=256k") != 0)
        skip_child("cannot mount a small tmpfs");
    target_write_old(t);
    check_failed_write_kept_old_file(t, ENOSPC);
    /* The failed write gave its space back: a file that fits is written fine. */
    static float fits[16 * 1024];
    attn_named_tensor small = {"fits", ATTN_DTYPE_F32, 1, {16 * 1024}, fits};
    CHECK_OK(attn_tensor_file_write(t->path, &small, 1, NULL, 0));
}

static void test_full_disk_keeps_old_file(void)
{
    target t;
    target_init(&t, "full_disk", "model.safetensors");
    check_child(run_in_child(full_disk_body, &t), "full disk");
    free(t.old_bytes);
}

/* ---- SIGKILL in the middle of writing ------------------------------------------------- */

#define CRASH_FLOATS (1 << 20) /* a 4 MiB file: writing and syncing it takes a while */

/* Odd and even versions carry different weights, computed once so the writer spends its time
 * writing: a file mixing two versions, or cut short, cannot pass read_version. */
static float *crash_weights[2];

static attn_status write_version(const char *path, int64_t version)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)version);
    attn_named_tensor tensors[] = {
        {"weights", ATTN_DTYPE_F32, 2, {1024, CRASH_FLOATS / 1024}, crash_weights[version & 1]},
        {"version", ATTN_DTYPE_I64, 0, {0}, &version},
    };
    attn_metadata_entry meta = {"version", text};
    return attn_tensor_file_write(path, tensors, 2, &meta, 1);
}

/* The file at path is complete and self-consistent; returns its version, or -1. */
static int64_t read_version(const char *path)
{
    attn_tensor_file *file = NULL;
    if (attn_tensor_file_open(path, &file) != ATTN_OK) {
        fprintf(stderr, "  %s\n", attn_last_error());
        return -1;
    }
    int64_t version = -1;
    const char *text = NULL;
    int64_t shape[2] = {1024, CRASH_FLOATS / 1024};
    float *values = test_alloc(CRASH_FLOATS * sizeof *values);
    int ok =
        attn_tensor_file_read_raw(file, "version", ATTN_DTYPE_I64, 0, NULL, &version) == ATTN_OK &&
        attn_tensor_file_metadata(file, "version", &text) == ATTN_OK &&
        strtoll(text, NULL, 10) == version &&
        attn_tensor_file_read_f32(file, "weights", 2, shape, values) == ATTN_OK;
    ok = ok && memcmp(values, crash_weights[version & 1], CRASH_FLOATS * sizeof *values) == 0;
    free(values);
    attn_tensor_file_close(file);
    return ok ? version : -1;
}

static double seconds_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void test_killed_writer_leaves_old_or_new_file(void)
{
    for (int parity = 0; parity < 2; parity++) {
        crash_weights[parity] = test_alloc(CRASH_FLOATS * sizeof *crash_weights[parity]);
        test_fill_uniform(crash_weights[parity], CRASH_FLOATS, -1.0f, 1.0f, 100 + parity);
    }
    const char *folder = test_scratch_folder();
    char path[700];
    snprintf(path, sizeof path, "%s", test_scratch_path("crash.safetensors"));
    double start = seconds_now();
    CHECK_OK(write_version(path, 0));
    double write_seconds = seconds_now() - start;

    attn_rng rng;
    attn_rng_seed(&rng, 77);
    const int rounds = 16;
    int64_t last_version = 0;
    int consistent = 1, killed_mid_write = 0, replaced = 0;
    for (int round = 1; round <= rounds; round++) {
        const int64_t first_version = (int64_t)round * 1000000;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            for (int64_t v = first_version;; v++)
                if (write_version(path, v) != ATTN_OK)
                    _exit(3);
        }
        if (pid < 0) {
            CHECK(0, "fork");
            break;
        }
        /* Somewhere in the child's first three writes, rarely on a boundary. */
        double delay = write_seconds * (0.2 + 2.8 * (double)attn_rng_uniform(&rng));
        struct timespec pause = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&pause, NULL);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer died by SIGKILL");

        char temp[760];
        snprintf(temp, sizeof temp, "%s.tmp.%ld", path, (long)pid);
        killed_mid_write += path_exists(temp);
        unlink(temp); /* what a crash leaves; the next writer of this pid would replace it */

        int64_t version = read_version(path);
        int expected = version == last_version || version >= first_version;
        consistent &= expected;
        if (!expected)
            fprintf(stderr, "  round %d: found version %lld, expected %lld or >= %lld\n", round,
                    (long long)version, (long long)last_version, (long long)first_version);
        replaced += version >= first_version;
        last_version = version;
    }
    CHECK(consistent, "after every kill the file is the old one or a complete new one");
    CHECK(killed_mid_write > 0, "at least one kill landed during a write (%d of %d)",
          killed_mid_write, rounds);
    CHECK(count_entries(folder, "crash.safetensors.tmp.") == 0, "stale temporaries removed");
    printf("       one write: %.1f ms; %d of %d kills landed mid-write; %d rounds replaced the "
           "file\n",
           1e3 * write_seconds, killed_mid_write, rounds, replaced);
    free(crash_weights[0]);
    free(crash_weights[1]);
}

int main(void)
{
    RUN_TEST(test_missing_folder_is_io_error);
    RUN_TEST(test_unwritable_folder_keeps_old_file);
    RUN_TEST(test_failed_rename_leaves_everything_in_place);
    RUN_TEST(test_write_error_midway_keeps_old_file);
    RUN_TEST(test_full_disk_keeps_old_file);
    RUN_TEST(test_killed_writer_leaves_old_or_new_file);
    return test_summary();
}
