/* outfile.h — outputs that never harm inputs (internal, prefix psc_out_,
 * psc_outdir_).
 *
 * Every file a command writes goes through here:
 *   - an output that is one of the inputs (same st_dev/st_ino, so also
 *     through a symlink or a hard link; "-" is standard input) is refused
 *     before anything is created;
 *   - a regular file (new, or replacing one) is written to a temporary file
 *     ".NAME.XXXXXX" in the directory of its final place (a symlink's
 *     target) and renamed over it by psc_out_commit, so a failure at any
 *     point leaves the old file, or nothing, and no partial output;
 *   - nothing is ever removed or truncated but that temporary file: an
 *     existing output that is not a regular file (a device, a FIFO) is
 *     written in place without O_TRUNC when the caller allows it
 *     (PSC_OUT_SPECIAL), else refused; a directory is refused.
 * psc_outdir_ does the same for a directory of files (plot): the files are
 * made in a temporary directory beside it, which becomes the directory when
 * it did not exist, or whose files are renamed into it one by one.
 *
 * Errors are the project's codes with a one-line message for the user:
 * PSC_EINVAL (same file as an input, a directory, a dangling symlink),
 * PSC_EUNSUP (not a regular file and PSC_OUT_SPECIAL not given), PSC_EIO
 * (create, write, sync or rename failed; errno's text in the message).
 */
#ifndef PSC_OUTFILE_H
#define PSC_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

typedef struct psc_out psc_out_t;

enum { PSC_OUT_SPECIAL = 1 };   /* a device or FIFO output is written in place */

/* 1 when a and b name the same file (following symlinks; "-" = stdin),
 * 0 when not or when either does not exist. */
int psc_same_file(const char *a, const char *b);
/* 0, or PSC_EINVAL with "PATH is the input file INPUT" when path names the
 * same file as one of inputs[0..n) (NULL entries skipped). */
int psc_out_check_inputs(const char *path, const char *const *inputs, size_t n,
                         char *msg, size_t msglen);

/* Start writing `path`. 0 and *out, or an error with msg (nothing created). */
int psc_out_open(const char *path, const char *const *inputs, size_t n_inputs, int flags,
                 psc_out_t **out, char *msg, size_t msglen);
/* A stdio stream on the output (opened on first call; NULL on failure). */
FILE *psc_out_stream(psc_out_t *o);
/* The file to write by name (the temporary file; the path itself when it
 * is written in place): for libraries that open files themselves (SQLite).
 * Close what was opened on it before psc_out_commit. */
const char *psc_out_path(const psc_out_t *o);
/* 1 when the output is a device or FIFO written in place. */
int psc_out_in_place(const psc_out_t *o);
/* Flush, sync, close and rename into place. 0, or PSC_EIO with msg (then
 * the temporary file is removed). Frees o either way; accepts NULL (0). */
int psc_out_commit(psc_out_t *o, char *msg, size_t msglen);
/* Close and remove the temporary file. Frees o; accepts NULL. */
void psc_out_abort(psc_out_t *o);

typedef struct psc_outdir psc_outdir_t;

/* Start writing the files of directory `dir` (made if missing). Refuses an
 * existing `dir` that is not a directory, or is one of the inputs. inputs
 * must stay valid until commit, which checks them again against each file. */
int psc_outdir_open(const char *dir, const char *const *inputs, size_t n_inputs,
                    psc_outdir_t **out, char *msg, size_t msglen);
/* Where to write the files now (a temporary directory). */
const char *psc_outdir_path(const psc_outdir_t *d);
/* Publish every file of the temporary directory into `dir`: 0, or PSC_EIO /
 * PSC_EINVAL (a file would replace an input or something not a regular
 * file) with msg; what was not published is removed. Frees d; accepts NULL. */
int psc_outdir_commit(psc_outdir_t *d, char *msg, size_t msglen);
/* Remove the temporary directory and what is in it. Frees d; accepts NULL. */
void psc_outdir_abort(psc_outdir_t *d);

#endif
