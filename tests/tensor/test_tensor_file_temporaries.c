/* attn_tensor_file_remove_stale_temporaries: the "<path>.tmp.<pid>" files of writers that no
 * longer run go; a running writer's file and every other file stay. */
#define _GNU_SOURCE

#include "tensor_file_support.h"

#include <sys/wait.h>

/* The pid of a process that has ended and been reaped. */
static pid_t ended_pid(void)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static void touch(const char *path)
{
    write_bytes(path, "partial", 7);
}

static void test_removes_only_stale_temporaries(void)
{
    char dead[800], dead_other[800], live[800], not_pid[800], model[660];
    const long gone = (long)ended_pid();
    snprintf(model, sizeof model, "%s", test_scratch_path("m.safetensors"));
    snprintf(dead, sizeof dead, "%s.tmp.%ld", model, gone);
    snprintf(live, sizeof live, "%s.tmp.%ld", model, (long)getpid());
    snprintf(not_pid, sizeof not_pid, "%s.tmp.12x", model);
    snprintf(dead_other, sizeof dead_other, "%s.tmp.%ld", test_scratch_path("other.safetensors"),
             gone);
    touch(model);
    touch(dead);
    touch(live);
    touch(not_pid);
    touch(dead_other);
    int64_t removed = -1;
    CHECK_OK(attn_tensor_file_remove_stale_temporaries(model, &removed));
    CHECK(removed == 1, "removed %lld files, expected 1", (long long)removed);
    CHECK(!exists(dead), "the killed writer's temporary is still there");
    CHECK(exists(live), "a running writer's temporary was removed");
    CHECK(exists(not_pid) && exists(dead_other) && exists(model),
          "a file that is not this path's temporary was removed");
    CHECK_OK(attn_tensor_file_remove_stale_temporaries(model, NULL));
    CHECK(exists(live), "a running writer's temporary was removed");
}

static void test_relative_path(void)
{
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    CHECK(chdir(test_scratch_folder()) == 0, "chdir");
    char dead[128];
    snprintf(dead, sizeof dead, "r.safetensors.tmp.%ld", (long)ended_pid());
    touch(dead);
    int64_t removed = 0;
    CHECK_OK(attn_tensor_file_remove_stale_temporaries("r.safetensors", &removed));
    CHECK(removed == 1 && !exists(dead), "a temporary in the current folder stayed");
    CHECK(chdir(cwd) == 0, "chdir back");
}

static void test_missing_folder_and_bad_arguments(void)
{
    int64_t removed = -1;
    CHECK_OK(attn_tensor_file_remove_stale_temporaries(test_scratch_path("none/m.safetensors"),
                                                       &removed));
    CHECK(removed == 0, "removed %lld files from a missing folder", (long long)removed);
    CHECK_FAILS(attn_tensor_file_remove_stale_temporaries(NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_remove_stale_temporaries("", NULL), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_removes_only_stale_temporaries);
    RUN_TEST(test_relative_path);
    RUN_TEST(test_missing_folder_and_bad_arguments);
    return test_summary();
}
