/* test_launch.c — the launcher half of `poolscope record`
 * (libtrace/launch.c): which targets are refused, PATH search, where the
 * preload library is found, the output directory check, manifest lines,
 * exit statuses, and running a program: its environment, a failed exec,
 * the kernel's name of its last image, signals sent to us reaching it, and
 * its exit seen when another thread takes the SIGCHLD.
 * The summary half (END chunks, untraced children) is tests/test_record.c.
 *
 * ELF files are built here byte by byte (a header and program headers are
 * all the checks read), so no static libc is needed.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch.h"
#include "poolscope/error.h"

static char dir[] = "/tmp/test_launch.XXXXXX";
static char msg[PL_MSG_MAX];

static int make_dir(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}
static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_in(char *out, size_t cap, const char *name)
{
    assert_true((size_t)snprintf(out, cap, "%s/%s", dir, name) < cap);
}

static void write_file(const char *p, const char *text, mode_t mode)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(p, mode), 0);
}

static int has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* An ELF64 file with one PT_LOAD, plus a PT_INTERP when `dynamic`;
 * `bad_phentsize` makes the program header table malformed. */
static void write_elf(const char *p, int dynamic, int bad_phentsize)
{
    Elf64_Ehdr eh;
    memset(&eh, 0, sizeof eh);
    memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_EXEC;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_phoff = sizeof eh;
    eh.e_ehsize = sizeof eh;
    eh.e_phentsize = bad_phentsize ? 8 : sizeof(Elf64_Phdr);
    eh.e_phnum = dynamic ? 2 : 1;
    Elf64_Phdr ph[2];
    memset(ph, 0, sizeof ph);
    ph[0].p_type = PT_LOAD;
    ph[1].p_type = PT_INTERP;
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(&eh, sizeof eh, 1, f), 1);
    assert_int_equal(fwrite(ph, sizeof ph[0], eh.e_phnum, f), eh.e_phnum);
    fclose(f);
    assert_int_equal(chmod(p, 0755), 0);
}

/* ---- target checks ------------------------------------------------------------ */

static void test_static_binary_is_refused(void **state)
{
    (void)state;
    char p[256];
    path_in(p, sizeof p, "static-prog");
    write_elf(p, 0, 0);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_EUNSUP);
    assert_true(has(msg, "static-prog is statically linked"));
    path_in(p, sizeof p, "dynamic-prog");
    write_elf(p, 1, 0);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), 0);
    path_in(p, sizeof p, "broken-elf");
    write_elf(p, 1, 1);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_ECORRUPT);
    assert_true(has(msg, "malformed ELF"));
}

static void test_setuid_and_setgid_files_are_refused(void **state)
{
    (void)state;
    char p[256];
    path_in(p, sizeof p, "suid-prog");
    write_elf(p, 1, 0);
    assert_int_equal(chmod(p, 04755), 0);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_EUNSUP);
    assert_true(has(msg, "suid-prog is setuid"));
    path_in(p, sizeof p, "sgid-prog");
    write_elf(p, 1, 0);
    assert_int_equal(chmod(p, 02755), 0);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_EUNSUP);
    assert_true(has(msg, "sgid-prog is setgid"));
}

static void test_script_is_judged_by_its_interpreter(void **state)
{
    (void)state;
    char p[256], interp[256], text[512];
    path_in(p, sizeof p, "ok.sh");
    write_file(p, "#!/bin/sh\necho hi\n", 0755);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), 0);
    /* "#! interp arg": the interpreter is the first word */
    path_in(interp, sizeof interp, "static-interp");
    write_elf(interp, 0, 0);
    snprintf(text, sizeof text, "#! %s -x\n", interp);
    path_in(p, sizeof p, "bad.sh");
    write_file(p, text, 0755);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_EUNSUP);
    assert_true(has(msg, "static-interp is statically linked"));
    /* a script of a script of the static one: still found */
    snprintf(text, sizeof text, "#!%s\n", p);
    path_in(p, sizeof p, "worse.sh");
    write_file(p, text, 0755);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_EUNSUP);
    path_in(p, sizeof p, "lost.sh");
    write_file(p, "#!/no/such/interpreter\n", 0755);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_ENOENT);
    assert_true(has(msg, "/no/such/interpreter"));
}

static void test_non_elf_missing_and_directory(void **state)
{
    (void)state;
    char p[256];
    path_in(p, sizeof p, "plain.txt");
    write_file(p, "echo a shell script without a #! line\n", 0755);
    assert_int_equal(pl_check_target(p, msg, sizeof msg), 0);   /* exec hands it to /bin/sh */
    path_in(p, sizeof p, "missing-prog");
    assert_int_equal(pl_check_target(p, msg, sizeof msg), PSC_ENOENT);
    assert_true(has(msg, "missing-prog"));
    assert_int_equal(pl_check_target(dir, msg, sizeof msg), PSC_EINVAL);
    assert_true(has(msg, "not a regular file"));
}

/* ---- PATH search --------------------------------------------------------------- */

static void mkdir_in(char *out, size_t cap, const char *name)
{
    path_in(out, cap, name);
    assert_true(mkdir(out, 0755) == 0 || errno == EEXIST);
}

static void test_path_skips_what_cannot_run(void **state)
{
    (void)state;
    char d1[256], d2[256], p[512], path[1024], out[PATH_MAX];
    mkdir_in(d1, sizeof d1, "p1");
    mkdir_in(d2, sizeof d2, "p2");
    snprintf(p, sizeof p, "%s/tool", d1);
    write_file(p, "#!/bin/sh\n", 0644);                 /* not executable */
    snprintf(p, sizeof p, "%s/sub", d1);
    assert_int_equal(mkdir(p, 0755), 0);                /* a directory of that name */
    snprintf(p, sizeof p, "%s/tool", d2);
    write_file(p, "#!/bin/sh\n", 0755);
    snprintf(p, sizeof p, "%s/sub", d2);
    write_file(p, "#!/bin/sh\n", 0755);
    snprintf(path, sizeof path, "/no/such/dir:%s:%s", d1, d2);
    assert_int_equal(pl_resolve_cmd("tool", path, out, sizeof out, msg, sizeof msg), 0);
    snprintf(p, sizeof p, "%s/tool", d2);
    assert_string_equal(out, p);
    assert_int_equal(pl_resolve_cmd("sub", path, out, sizeof out, msg, sizeof msg), 0);
    snprintf(p, sizeof p, "%s/sub", d2);
    assert_string_equal(out, p);
    /* only the non-executable one on the path: not found */
    snprintf(path, sizeof path, "%s", d1);
    assert_int_equal(pl_resolve_cmd("tool", path, out, sizeof out, msg, sizeof msg), PSC_ENOENT);
    assert_true(has(msg, "tool: command not found"));
    assert_int_equal(pl_resolve_exit_code(PSC_ENOENT), 127);
}

static void test_path_empty_element_is_the_current_directory(void **state)
{
    (void)state;
    char d[256], p[512], out[PATH_MAX], cwd[PATH_MAX];
    mkdir_in(d, sizeof d, "here");
    snprintf(p, sizeof p, "%s/localtool", d);
    write_file(p, "#!/bin/sh\n", 0755);
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(d), 0);
    int a = pl_resolve_cmd("localtool", "/no/such/dir::/also/none", out, sizeof out, msg, sizeof msg);
    char got_middle[PATH_MAX];
    snprintf(got_middle, sizeof got_middle, "%s", out);
    int b = pl_resolve_cmd("localtool", "/no/such/dir:", out, sizeof out, msg, sizeof msg);  /* trailing */
    int c = pl_resolve_cmd("localtool", "/no/such/dir", out, sizeof out, msg, sizeof msg);   /* none */
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(a, 0);
    assert_string_equal(got_middle, "localtool");
    assert_int_equal(b, 0);
    assert_int_equal(c, PSC_ENOENT);
}

static void test_path_over_long_entries_are_skipped(void **state)
{
    (void)state;
    char d[256], p[512], out[PATH_MAX];
    mkdir_in(d, sizeof d, "longpath");
    snprintf(p, sizeof p, "%s/lt", d);
    write_file(p, "#!/bin/sh\n", 0755);
    /* an element longer than any path, then the good one */
    size_t n = PATH_MAX + 100;
    char *path = malloc(n + strlen(d) + 2);
    assert_non_null(path);
    memset(path, 'x', n);
    path[0] = '/';
    snprintf(path + n, strlen(d) + 2, ":%s", d);
    assert_int_equal(pl_resolve_cmd("lt", path, out, sizeof out, msg, sizeof msg), 0);
    assert_string_equal(out, p);
    /* an output buffer too small for the good one: skipped too, not cut */
    char small[8];
    assert_int_equal(pl_resolve_cmd("lt", d, small, sizeof small, msg, sizeof msg), PSC_ENOENT);
    free(path);
    /* a name with a slash longer than the buffer */
    char longname[PATH_MAX + 64];
    memset(longname, 'y', sizeof longname - 1);
    longname[0] = '/';
    longname[sizeof longname - 1] = 0;
    assert_int_equal(pl_resolve_cmd(longname, NULL, out, sizeof out, msg, sizeof msg), PSC_ERANGE);
    assert_int_equal(pl_resolve_exit_code(PSC_ERANGE), 127);
}

static void test_name_with_slash_is_taken_as_is(void **state)
{
    (void)state;
    char p[256], out[PATH_MAX];
    path_in(p, sizeof p, "direct");
    write_file(p, "#!/bin/sh\n", 0755);
    assert_int_equal(pl_resolve_cmd(p, "/no/such/dir", out, sizeof out, msg, sizeof msg), 0);
    assert_string_equal(out, p);
    path_in(p, sizeof p, "noexec");
    write_file(p, "#!/bin/sh\n", 0644);
    assert_int_equal(pl_resolve_cmd(p, NULL, out, sizeof out, msg, sizeof msg), PSC_EINVAL);
    assert_true(has(msg, "noexec: not an executable file"));
    assert_int_equal(pl_resolve_exit_code(PSC_EINVAL), 126);
    path_in(p, sizeof p, "absent");
    assert_int_equal(pl_resolve_cmd(p, NULL, out, sizeof out, msg, sizeof msg), PSC_ENOENT);
    /* an empty PATH means the default one, where sh lives */
    assert_int_equal(pl_resolve_cmd("sh", "", out, sizeof out, msg, sizeof msg), 0);
    assert_true(has(out, "/sh"));
}

/* ---- the preload library ------------------------------------------------------ */

static void test_preload_found_next_to_the_binary(void **state)
{
    (void)state;
    char d[256], p[512], bin[512], out[PATH_MAX], want[PATH_MAX];
    unsetenv("POOLSCOPE_PRELOAD_LIB");
    /* build tree: <bin>/../lib/ */
    mkdir_in(d, sizeof d, "tree");
    snprintf(bin, sizeof bin, "%s/bin", d);
    assert_int_equal(mkdir(bin, 0755), 0);
    snprintf(p, sizeof p, "%s/lib", d);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/lib/poolscope", d);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/lib/poolscope/%s", d, PL_PRELOAD_NAME);
    write_file(p, "installed", 0644);
    /* only the installed layout: found there */
    assert_int_equal(pl_find_preload(bin, out, sizeof out, msg, sizeof msg), 0);
    assert_non_null(realpath(p, want));
    assert_string_equal(out, want);
    /* both: the build tree's wins */
    snprintf(p, sizeof p, "%s/lib/%s", d, PL_PRELOAD_NAME);
    write_file(p, "built", 0644);
    assert_int_equal(pl_find_preload(bin, out, sizeof out, msg, sizeof msg), 0);
    assert_non_null(realpath(p, want));
    assert_string_equal(out, want);
    /* the override wins over both */
    char other[512];
    path_in(other, sizeof other, "my-preload.so");
    write_file(other, "mine", 0644);
    setenv("POOLSCOPE_PRELOAD_LIB", other, 1);
    assert_int_equal(pl_find_preload(bin, out, sizeof out, msg, sizeof msg), 0);
    assert_non_null(realpath(other, want));
    assert_string_equal(out, want);
    unsetenv("POOLSCOPE_PRELOAD_LIB");
}

static void test_preload_missing_says_where_it_looked(void **state)
{
    (void)state;
    char d[256], bin[512], out[PATH_MAX];
    mkdir_in(d, sizeof d, "lonely");
    snprintf(bin, sizeof bin, "%s/bin", d);
    assert_int_equal(mkdir(bin, 0755), 0);
    unsetenv("POOLSCOPE_PRELOAD_LIB");
    assert_int_equal(pl_find_preload(bin, out, sizeof out, msg, sizeof msg), PSC_ENOENT);
    assert_true(has(msg, "preload library not found"));
    assert_true(has(msg, "lonely/bin/../lib/" PL_PRELOAD_NAME));
    assert_true(has(msg, "lonely/bin/../lib/poolscope/" PL_PRELOAD_NAME));
    setenv("POOLSCOPE_PRELOAD_LIB", "/no/such/preload.so", 1);
    assert_int_equal(pl_find_preload(bin, out, sizeof out, msg, sizeof msg), PSC_ENOENT);
    assert_true(has(msg, "POOLSCOPE_PRELOAD_LIB=/no/such/preload.so"));
    unsetenv("POOLSCOPE_PRELOAD_LIB");
}

/* ---- output directory, manifest file ------------------------------------------ */

static void test_output_directory_checked_before_anything_runs(void **state)
{
    (void)state;
    char p[256], abs[PATH_MAX];
    path_in(p, sizeof p, "exists.pst");
    write_file(p, "keep", 0644);
    assert_int_equal(pl_prepare_output(p, abs, sizeof abs, msg, sizeof msg), PSC_EINVAL);
    assert_true(has(msg, "exists.pst exists"));
    path_in(p, sizeof p, "new.pst");
    assert_int_equal(pl_prepare_output(p, abs, sizeof abs, msg, sizeof msg), 0);
    assert_string_equal(abs, p);
    path_in(p, sizeof p, "no-such-dir/x.pst");
    assert_int_equal(pl_prepare_output(p, abs, sizeof abs, msg, sizeof msg), PSC_ENOENT);
    char d[256];
    path_in(d, sizeof d, "no-such-dir");
    assert_true(has(msg, d));
    path_in(p, sizeof p, "exists.pst/x.pst");   /* a file where the directory should be */
    assert_true(pl_prepare_output(p, abs, sizeof abs, msg, sizeof msg) < 0);
    /* access() would let root in; the probe file cannot be made */
    assert_true(pl_prepare_output("/proc/x.pst", abs, sizeof abs, msg, sizeof msg) < 0);
    assert_true(has(msg, "cannot write in /proc"));
    /* no -o: the working directory, made absolute */
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    int a = pl_prepare_output(NULL, abs, sizeof abs, msg, sizeof msg);
    char got[PATH_MAX];
    snprintf(got, sizeof got, "%s", abs);
    int b = pl_prepare_output("rel.pst", abs, sizeof abs, msg, sizeof msg);
    char got_rel[PATH_MAX];
    snprintf(got_rel, sizeof got_rel, "%s", abs);
    assert_int_equal(chdir("/proc"), 0);
    int c = pl_prepare_output(NULL, abs, sizeof abs, msg, sizeof msg);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(a, 0);
    assert_string_equal(got, dir);
    assert_int_equal(b, 0);
    path_in(p, sizeof p, "rel.pst");
    assert_string_equal(got_rel, p);
    assert_true(c < 0);
    assert_true(has(msg, "cannot write in the current directory /proc"));
}

static void test_manifest_file_made_in_tmpdir(void **state)
{
    (void)state;
    char m[PATH_MAX];
    const char *old = getenv("TMPDIR");
    char *keep = old ? strdup(old) : NULL;
    setenv("TMPDIR", dir, 1);
    assert_int_equal(pl_manifest_create(m, sizeof m, msg, sizeof msg), 0);
    assert_int_equal(strncmp(m, dir, strlen(dir)), 0);
    struct stat st;
    assert_int_equal(stat(m, &st), 0);
    assert_int_equal(st.st_size, 0);
    setenv("TMPDIR", "/no/such/tmp", 1);
    assert_int_equal(pl_manifest_create(m, sizeof m, msg, sizeof msg), PSC_EIO);
    assert_true(has(msg, "/no/such/tmp"));
    if (keep) setenv("TMPDIR", keep, 1);
    else unsetenv("TMPDIR");
    free(keep);
}

/* ---- manifest lines ------------------------------------------------------------ */

static void test_manifest_lines_malformed(void **state)
{
    (void)state;
    long pid = 0;
    char *path = NULL;
    char ok[] = "77\t/t/a.pst\r\n";
    assert_int_equal(pl_manifest_line(ok, &pid, &path), 0);
    assert_int_equal(pid, 77);
    assert_string_equal(path, "/t/a.pst");
    char a[] = "", b[] = "\n", c[] = "0\t/p\n", d[] = "99999999999999999999999\t/p\n",
         e[] = "12 \t/p\n", f[] = "12\t\r\n", g[] = "/p only\n", h[] = "12/p\n";
    char *bad[] = { a, b, c, d, e, f, g, h };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(pl_manifest_line(bad[i], &pid, &path), -1);
}

static void test_manifest_long_and_bad_lines_in_a_summary(void **state)
{
    (void)state;
    char m[256];
    path_in(m, sizeof m, "manifest-long");
    FILE *f = fopen(m, "w");
    assert_non_null(f);
    /* a 10000-byte path: one entry, not a split line read as two */
    fputs("31\t/", f);
    for (int i = 0; i < 10000; i++) fputc('z', f);
    fputs(".pst\nnot a line\n\n-4\t/x\n32\t/no/such/file.pst\n", f);
    fclose(f);
    int err = 1;
    pl_summary_t *s = pl_summary_read(m, NULL, &err);
    assert_non_null(s);
    assert_int_equal(err, 0);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->entries[0].pid, 31);
    assert_int_equal(strlen(s->entries[0].path), 10005);
    assert_int_equal(s->entries[1].pid, 32);
    assert_int_equal(s->entries[1].info.err, PSC_EIO);
    char out[32768];
    FILE *o = fmemopen(out, sizeof out, "w");
    assert_int_equal(pl_summary_print(s, NULL, o), 2);
    fclose(o);
    assert_true(has(out, "pid 32: /no/such/file.pst: unreadable trace"));
    pl_summary_free(s);
    /* no manifest at all: nothing listed, and the warning */
    s = pl_summary_read("/no/such/manifest", NULL, &err);
    assert_non_null(s);
    assert_int_equal(s->n, 0);
    o = fmemopen(out, sizeof out, "w");
    assert_int_equal(pl_summary_print(s, "/o.pst", o), 0);
    fclose(o);
    assert_true(has(out, "no trace was written to /o.pst"));
    pl_summary_free(s);
}

/* ---- exit statuses --------------------------------------------------------------- */

static int status_of(int how)
{
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        if (how >= 0) _exit(how);
        signal(-how, SIG_DFL);
        raise(-how);
        _exit(99);
    }
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    return st;
}

static void test_exit_status_mapping(void **state)
{
    (void)state;
    assert_int_equal(pl_exit_code(status_of(0)), 0);
    assert_int_equal(pl_exit_code(status_of(3)), 3);
    assert_int_equal(pl_exit_code(status_of(255)), 255);
    assert_int_equal(pl_exit_code(status_of(-SIGTERM)), 128 + SIGTERM);
    assert_int_equal(pl_exit_code(status_of(-SIGKILL)), 128 + SIGKILL);
    assert_int_equal(pl_exit_code(status_of(-SIGSEGV)), 128 + SIGSEGV);
}

/* ---- running ---------------------------------------------------------------------- */

static void started_cb(void *ctx, pid_t pid) { *(pid_t *)ctx = pid; }

static void test_run_reports_status_and_last_image_name(void **state)
{
    (void)state;
    char *const argv[] = { (char *)"sh", (char *)"-c", (char *)"exit 7", NULL };
    pid_t seen = 0;
    pl_spec_t s = { .target = "/bin/sh", .argv = argv, .started = started_cb, .started_ctx = &seen };
    pl_result_t r;
    assert_int_equal(pl_run(&s, &r, msg, sizeof msg), 0);
    assert_int_equal(r.exit_code, 7);
    assert_true(r.pid > 0);
    assert_int_equal(seen, r.pid);
    assert_string_equal(r.comm, "sh");
    /* the kernel's name follows an exec */
    char *const argv2[] = { (char *)"sh", (char *)"-c", (char *)"exec sleep 0", NULL };
    s.argv = argv2;
    assert_int_equal(pl_run(&s, &r, msg, sizeof msg), 0);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.comm, "sleep");
    /* killed by a signal: 128 + N */
    char *const argv3[] = { (char *)"sh", (char *)"-c", (char *)"kill -KILL $$", NULL };
    s.argv = argv3;
    assert_int_equal(pl_run(&s, &r, msg, sizeof msg), 0);
    assert_int_equal(r.exit_code, 137);
    assert_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
}

static void test_run_failed_exec(void **state)
{
    (void)state;
    char p[256];
    path_in(p, sizeof p, "gone");
    char *const argv[] = { p, NULL };
    pid_t seen = 0;
    pl_spec_t s = { .target = p, .argv = argv, .started = started_cb, .started_ctx = &seen };
    pl_result_t r;
    assert_int_equal(pl_run(&s, &r, msg, sizeof msg), PSC_ENOENT);
    assert_int_equal(r.exit_code, 127);
    assert_true(has(msg, "gone"));
    assert_int_equal(seen, 0);   /* never started */
    path_in(p, sizeof p, "cannot-exec");
    write_file(p, "#!/bin/sh\n", 0644);
    assert_int_equal(pl_run(&s, &r, msg, sizeof msg), PSC_EUNSUP);
    assert_int_equal(r.exit_code, 126);
    /* no "#!": exec says ENOEXEC and it runs under /bin/sh, as execvp does */
    char marker[256], text[512];
    path_in(marker, sizeof marker, "ran-under-sh");
    snprintf(text, sizeof text, "echo \"$1\" > '%s'\n", marker);
    path_in(p, sizeof p, "bare-script");
    write_file(p, text, 0755);
    char *const argv2[] = { p, (char *)"arg1", NULL };
    s.argv = argv2;
    assert_int_equal(pl_run(&s, &r, msg, sizeof msg), 0);
    assert_int_equal(r.exit_code, 0);
    FILE *f = fopen(marker, "r");
    assert_non_null(f);
    char line[64] = { 0 };
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "arg1\n");
}

/* Some shared library this process has mapped: a harmless LD_PRELOAD. */
static void mapped_library(const char *name, char *out, size_t cap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[1024];
    out[0] = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (p && strstr(p, name)) {
            p[strcspn(p, "\n")] = 0;
            snprintf(out, cap, "%s", p);
            break;
        }
    }
    fclose(f);
    assert_true(out[0] == '/');
}

static char *slurp(const char *p)
{
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_run_sets_the_interposer_environment(void **state)
{
    (void)state;
    char lib[PATH_MAX], envf[256], cmd[512], cwd[PATH_MAX];
    char lib2[PATH_MAX];
    mapped_library("libcmocka", lib, sizeof lib);
    mapped_library("/libc.so", lib2, sizeof lib2);
    path_in(envf, sizeof envf, "child.env");
    snprintf(cmd, sizeof cmd, "env > '%s'", envf);
    /* stale settings from outside must not survive */
    setenv("POOLSCOPE_STACKS", "dwarf", 1);
    setenv("POOLSCOPE_DEPTH", "99", 1);
    setenv("POOLSCOPE_PAUSED", "1", 1);
    setenv("LD_PRELOAD", lib, 1);   /* already there: not added twice */
    char *const argv[] = { (char *)"sh", (char *)"-c", cmd, NULL };
    pl_spec_t s = { .target = "/bin/sh", .argv = argv, .preload = lib, .out = "/x/t.pst",
                    .manifest = "/x/m", .stacks = "fp", .depth = 7, .follow_exec = "py*",
                    .signo = 12 };
    pl_result_t r;
    int rc = pl_run(&s, &r, msg, sizeof msg);
    unsetenv("POOLSCOPE_STACKS");
    unsetenv("POOLSCOPE_DEPTH");
    unsetenv("POOLSCOPE_PAUSED");
    unsetenv("LD_PRELOAD");
    assert_int_equal(rc, 0);
    assert_int_equal(r.exit_code, 0);
    const char *e = slurp(envf);
    char want[2 * PATH_MAX + 32];
    snprintf(want, sizeof want, "\nLD_PRELOAD=%s\n", lib);
    assert_true(has(e, want));
    assert_true(has(e, "\nPOOLSCOPE_OUT=/x/t.pst\n"));
    assert_true(has(e, "\nPOOLSCOPE_MANIFEST=/x/m\n"));
    assert_true(has(e, "\nPOOLSCOPE_STACKS=fp\n"));
    assert_true(has(e, "\nPOOLSCOPE_DEPTH=7\n"));
    assert_true(has(e, "\nPOOLSCOPE_FOLLOW_EXEC=py*\n"));
    assert_true(has(e, "\nPOOLSCOPE_SIGNAL=12\n"));
    assert_false(has(e, "POOLSCOPE_PAUSED"));
    assert_false(has(e, "dwarf"));
    /* another LD_PRELOAD goes after ours; no -o: <cwd>/poolscope.<pid>.pst */
    setenv("LD_PRELOAD", lib2, 1);
    pl_spec_t s2 = { .target = "/bin/sh", .argv = argv, .preload = lib, .paused = 1 };
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    rc = pl_run(&s2, &r, msg, sizeof msg);
    assert_int_equal(chdir(cwd), 0);
    unsetenv("LD_PRELOAD");
    assert_int_equal(rc, 0);
    e = slurp(envf);
    snprintf(want, sizeof want, "\nLD_PRELOAD=%s:%s\n", lib, lib2);
    assert_true(has(e, want));
    snprintf(want, sizeof want, "\nPOOLSCOPE_OUT=%s/poolscope.%ld.pst\n", dir, (long)r.pid);
    assert_true(has(e, want));
    assert_true(has(e, "\nPOOLSCOPE_PAUSED=1\n"));
    assert_false(has(e, "POOLSCOPE_MANIFEST"));
}

/* Signal forwarding: a thread sends SIGTERM to this process once the child
 * runs; the child (sleep 30) must die of it, and this process not. The
 * sending thread blocks SIGTERM itself, as launch.h asks of other threads:
 * the signal then waits for pl_run's signalfd. */
static sem_t go;
static volatile sig_atomic_t our_terms;
static void on_term(int sig) { (void)sig; our_terms++; }
static void started_post(void *ctx, pid_t pid) { (void)pid; sem_post(ctx); }
static void *send_term(void *arg)
{
    (void)arg;
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &m, NULL);
    while (sem_wait(&go) != 0) {}
    kill(getpid(), SIGTERM);
    return NULL;
}

static void test_sigterm_to_us_reaches_the_child(void **state)
{
    (void)state;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old);
    our_terms = 0;
    assert_int_equal(sem_init(&go, 0, 0), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_term, NULL), 0);
    char *const argv[] = { (char *)"sleep", (char *)"30", NULL };
    pl_spec_t s = { .target = "/bin/sleep", .argv = argv, .started = started_post, .started_ctx = &go };
    pl_result_t r;
    int rc = pl_run(&s, &r, msg, sizeof msg);
    pthread_join(th, NULL);
    assert_int_equal(rc, 0);
    assert_true(WIFSIGNALED(r.status));
    assert_int_equal(WTERMSIG(r.status), SIGTERM);
    assert_int_equal(r.exit_code, 128 + SIGTERM);
    assert_int_equal(our_terms, 0);     /* it went to the child, not to our handler */
    raise(SIGTERM);                     /* and our handler is back */
    assert_int_equal(our_terms, 1);
    sigaction(SIGTERM, &old, NULL);
    sem_destroy(&go);
}

/* A SIGCHLD taken by another thread. pl_run blocks SIGCHLD in its own
 * thread only; the kernel gives the process-wide signal to a thread that
 * does not block it, which drops it. Here a second thread takes it from
 * the process's queue on purpose (sigtimedwait), and pl_run must still
 * return the child's status.
 *
 * To make the theft certain rather than a race, the order is arranged:
 * the child (sh reading a pipe) exits only once pl_run's thread sleeps in
 * its wait; the taker polls for SIGCHLD in a loop on one CPU, pl_run's
 * thread is moved to that CPU under SCHED_IDLE (it does not preempt the
 * taker when woken) and the child to the other CPUs. Without that pl_run
 * won the race most of the time; with it, before the pidfd, pl_run hung in
 * each of 17 runs (plain and tsan). It all runs in a forked process, so a
 * hang is ended by the test instead of stopping the suite: 10 s is a
 * liveness bound, not a timing. */
static struct {
    pid_t tid;                 /* pl_run's thread */
    int cpu;                   /* the taker's CPU, -1: no pinning */
    int go;                    /* write end of the child's stdin */
    atomic_int started, done, took;
} thief;

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int read_small(const char *path, char *b, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, b, cap - 1);
    close(fd);
    if (n <= 0) return -1;
    b[n] = 0;
    return 0;
}

/* 1 when thread `tid` of this process sleeps in read or poll: pl_run's
 * wait for its child (the exec report came before `started`). */
static int sleeps_in_wait(pid_t tid)
{
    char p[64], b[512];
    snprintf(p, sizeof p, "/proc/self/task/%d/stat", (int)tid);
    if (read_small(p, b, sizeof b)) return 0;
    const char *st = strrchr(b, ')');
    if (!st || strncmp(st, ") S", 3) != 0) return 0;
    snprintf(p, sizeof p, "/proc/self/task/%d/syscall", (int)tid);
    if (read_small(p, b, sizeof b)) return 0;
    long nr = strtol(b, NULL, 10);
#ifdef SYS_poll
    if (nr == SYS_poll) return 1;
#endif
    return nr == SYS_read || nr == SYS_ppoll;
}

static void pin_to_thief_cpu(void)
{
    if (thief.cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(thief.cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static void thief_started(void *ctx, pid_t pid)
{
    (void)ctx;
    pin_to_thief_cpu();
    struct sched_param sp = { 0 };
    sched_setscheduler(0, SCHED_IDLE, &sp);    /* this thread only */
    cpu_set_t set, other;
    CPU_ZERO(&other);
    if (thief.cpu >= 0 && sched_getaffinity(pid, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (c != thief.cpu && CPU_ISSET(c, &set)) CPU_SET(c, &other);
        if (CPU_COUNT(&other)) sched_setaffinity(pid, sizeof other, &other);
    }
    atomic_store(&thief.started, 1);
}

static void *take_sigchld(void *arg)
{
    (void)arg;
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &chld, NULL);
    pin_to_thief_cpu();
    /* the child exits once pl_run waits (2 s at most: no /proc, go on) */
    uint64_t until = now_ms() + 2000;
    struct timespec ms = { 0, 1000000 }, zero = { 0, 0 };
    while (now_ms() < until && !(atomic_load(&thief.started) && sleeps_in_wait(thief.tid)))
        nanosleep(&ms, NULL);
    ssize_t w = write(thief.go, "\n", 1);
    close(thief.go);
    if (w != 1) return NULL;
    until = now_ms() + 1000;
    while (!atomic_load(&thief.done) && now_ms() < until)
        if (sigtimedwait(&chld, NULL, &zero) == SIGCHLD) {
            atomic_store(&thief.took, 1);
            break;
        }
    return NULL;
}

/* One round in the forked process: 0 pl_run gave exit code 3 and the other
 * thread took the SIGCHLD, 4 the same but pl_run had it, 1-3 failures. */
static int sigchld_thief_round(void)
{
    int pfd[2];
    if (pipe(pfd) || dup2(pfd[0], 0) < 0) return 1;
    close(pfd[0]);
    thief.go = pfd[1];
    fcntl(thief.go, F_SETFD, FD_CLOEXEC);
    thief.tid = (pid_t)syscall(SYS_gettid);
    thief.cpu = sched_getcpu();
    atomic_store(&thief.started, 0);
    atomic_store(&thief.done, 0);
    atomic_store(&thief.took, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, take_sigchld, NULL)) return 1;
    char *const argv[] = { (char *)"sh", (char *)"-c", (char *)"read x; exit 3", NULL };
    pl_spec_t s = { .target = "/bin/sh", .argv = argv, .started = thief_started };
    pl_result_t r;
    int rc = pl_run(&s, &r, msg, sizeof msg);
    atomic_store(&thief.done, 1);
    pthread_join(th, NULL);
    if (rc != 0) return 2;
    if (r.exit_code != 3) return 3;
    return atomic_load(&thief.took) ? 0 : 4;
}

/* Rounds until the other thread took the SIGCHLD once (3 at most: the
 * pinning above can be refused, e.g. a one-CPU cpuset). */
static int run_with_sigchld_thief(void)
{
    int rc = 4;
    for (int i = 0; i < 3 && rc == 4; i++) rc = sigchld_thief_round();
    return rc;
}

/* Forks, runs fn in the child and fails when it has not exited within
 * 10 s (then pl_run hangs) or exits with neither 0 nor 4 (5: skipped). */
static void expect_runner_ends(int (*fn)(void))
{
    fflush(NULL);
    pid_t runner = fork();
    assert_true(runner >= 0);
    if (runner == 0) _exit(fn());
    int status = 0;
    pid_t w = 0;
    uint64_t until = now_ms() + 10000;
    struct timespec ms = { 0, 10 * 1000000 };
    while ((w = waitpid(runner, &status, WNOHANG)) == 0 && now_ms() < until) nanosleep(&ms, NULL);
    if (w == 0) {
        kill(runner, SIGKILL);
        waitpid(runner, &status, 0);
        fail_msg("pl_run had not returned after 10 s: the child exited, another thread took its SIGCHLD");
    }
    assert_int_equal(w, runner);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 5) {
        print_message("note: no seccomp filter here; skipped\n");
        skip();
    }
    if (WEXITSTATUS(status) == 4)
        print_message("note: pl_run read the SIGCHLD itself; the case was not exercised\n");
    else
        assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_child_exit_seen_when_another_thread_takes_sigchld(void **state)
{
    (void)state;
    expect_runner_ends(run_with_sigchld_thief);
}

#ifdef SYS_pidfd_open
/* The same on a kernel without pidfd_open (before 5.3): a seccomp filter
 * makes it fail with ENOSYS in the forked process; pl_run then looks for
 * the exit every 100 ms. 5: the filter could not be set. */
static int run_with_sigchld_thief_no_pidfd(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 5;
    if (syscall(SYS_pidfd_open, getpid(), 0) >= 0 || errno != ENOSYS) return 5;
    return run_with_sigchld_thief();
}
#endif

static void test_child_exit_seen_without_pidfd_when_another_thread_takes_sigchld(void **state)
{
    (void)state;
#ifdef SYS_pidfd_open
    expect_runner_ends(run_with_sigchld_thief_no_pidfd);
#else
    expect_runner_ends(run_with_sigchld_thief);    /* the fallback is all there is */
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_binary_is_refused),
        cmocka_unit_test(test_setuid_and_setgid_files_are_refused),
        cmocka_unit_test(test_script_is_judged_by_its_interpreter),
        cmocka_unit_test(test_non_elf_missing_and_directory),
        cmocka_unit_test(test_path_skips_what_cannot_run),
        cmocka_unit_test(test_path_empty_element_is_the_current_directory),
        cmocka_unit_test(test_path_over_long_entries_are_skipped),
        cmocka_unit_test(test_name_with_slash_is_taken_as_is),
        cmocka_unit_test(test_preload_found_next_to_the_binary),
        cmocka_unit_test(test_preload_missing_says_where_it_looked),
        cmocka_unit_test(test_output_directory_checked_before_anything_runs),
        cmocka_unit_test(test_manifest_file_made_in_tmpdir),
        cmocka_unit_test(test_manifest_lines_malformed),
        cmocka_unit_test(test_manifest_long_and_bad_lines_in_a_summary),
        cmocka_unit_test(test_exit_status_mapping),
        cmocka_unit_test(test_run_reports_status_and_last_image_name),
        cmocka_unit_test(test_run_failed_exec),
        cmocka_unit_test(test_run_sets_the_interposer_environment),
        cmocka_unit_test(test_sigterm_to_us_reaches_the_child),
        cmocka_unit_test(test_child_exit_seen_when_another_thread_takes_sigchld),
        cmocka_unit_test(test_child_exit_seen_without_pidfd_when_another_thread_takes_sigchld),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
