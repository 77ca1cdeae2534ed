/* fuzz_sql.c — libFuzzer harness for `poolscope sql`: any bytes (as a
 * memfd path) are loaded into a new SQLite database in /dev/shm through
 * az_sql_write — scan, hook rows, stacks, frames, metrics — which is then
 * removed. Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "sqlite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], db[64], msg[256];
    if (fuzz_input_path(data, size, in, sizeof in)) return 0;
    snprintf(db, sizeof db, "/dev/shm/poolscope-fuzz-sql.%d.db", (int)getpid());
    az_sql_stats_t st;
    int warn = 0;
    (void)az_sql_write(in, db, &st, &warn, msg, sizeof msg);
    unlink(db);
    return 0;
}
