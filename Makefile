# poolscope — one Makefile for the whole tree.
#
# Every folder is one component and becomes one archive; sources are found by
# wildcard, so adding a file needs no edit here.
#
#   include/poolscope/*.h    the installed API (C and C++), nothing else
#   common/*.c            -> build/lib/libpscommon.a   (errors, hash map, formatting, checked arithmetic)
#   pool/*.c              -> build/lib/libpool.a       (knows nothing of traces)
#   libtrace/*.c          -> build/lib/libpstrace.a    (format, reader, event API, pool adapter)
#   libtrace/preload/*.c  -> build/lib/libpoolscope-preload.so (the interposer)
#   model/*.c             -> build/lib/libpsmodel.a    (what the events mean: the one interpreter)
#   analyzer/*.c          -> build/lib/libanalyzer.a   (the one metrics library)
#   replay/*.c            -> build/lib/libreplay.a
#   replay/helper/*.c     -> build/bin/poolscope-malloc-helper (the malloc policy's helper)
#   reference-engine/*.c  -> build/lib/libengine.a + build/bin/refengine (main.c)
#   cli/*.c               -> build/bin/poolscope       (argument parsing only)
#   tests/test_*.c        -> build/tests/test_*        (one cmocka suite each)
#   tests/progs/*.c       -> build/tests/progs/*       (programs run under the interposer)
#   bench/bench_*.c       -> build/bench/bench_*
#
# Variants: `make asan` and `make tsan` build into build/asan, build/tsan and
# run the unit suites (never the preload library: sanitizers replace malloc).
# `make debug` builds into build/debug with the internal checks compiled in
# (common/invariant.h) and runs the unit suites; `make test` runs them too.

BUILD   ?= build
CC      ?= cc
PREFIX  ?= /usr/local
SAN     ?=
WERROR  ?= -Werror
OPT     ?= -O2

# -Wmissing-prototypes: a function is static or declared in a header
# (tests/progs excepted, below).
WARN    = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla $(WERROR)
# Frame pointers everywhere: `record --stacks fp` walks them.
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) -g -fno-omit-frame-pointer -pthread $(WARN) \
             -MMD -MP $(CFLAGS)

# Layering: each component sees the public headers, common/ and its own
# folder, plus the folders of the components below it. Including a higher
# layer's internal header fails to compile; scripts/check-layers.sh checks
# the public headers' use against the same graph (README, "Architecture").
#   common -> pool -> libtrace -> model -> analyzer -> replay -> cli
#   reference-engine on pool and libtrace's event API
INC_common   = -Iinclude -Icommon
INC_pool     = $(INC_common) -Ipool
INC_libtrace = $(INC_pool) -Ilibtrace
INC_model    = $(INC_libtrace) -Imodel
INC_analyzer = $(INC_model) -Ianalyzer
INC_replay   = $(INC_analyzer) -Ireplay
INC_cli      = $(INC_replay) -Icli
INC_reference-engine = $(INC_pool) -Ireference-engine
INC_tests    = $(INC_cli) -Ireference-engine
INC_bench    = $(INC_tests)
comp = $(firstword $(subst /, ,$(1)))
incs = $(INC_$(call comp,$(1)))
ifneq ($(SAN),)
CFLAGS_ALL += -fsanitize=$(SAN) -fno-sanitize-recover=all
LDSAN       = -fsanitize=$(SAN)
endif
PIE_CFLAGS = $(CFLAGS_ALL) -fPIE
PIC_CFLAGS = $(CFLAGS_ALL) -fPIC -fvisibility=hidden
LDLIBS_ALL = -lsqlite3 -ldw -lelf -lz -lzstd -lstdc++ -lm -ldl -pthread
LDFLAGS_ALL = -pie $(LDSAN) $(LDFLAGS)

srcs = $(sort $(wildcard $(1)/*.c))
COMMON_SRC  := $(call srcs,common)
objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

POOL_SRC    := $(call srcs,pool)
TRACE_SRC   := $(call srcs,libtrace)
PRELOAD_SRC := $(call srcs,libtrace/preload)
MODEL_SRC   := $(call srcs,model)
AZ_SRC      := $(call srcs,analyzer)
RP_SRC      := $(call srcs,replay)
HELPER_SRC  := $(call srcs,replay/helper)
ENG_SRC     := $(filter-out reference-engine/main.c,$(call srcs,reference-engine))
CLI_SRC     := $(call srcs,cli)
TEST_SRC    := $(sort $(wildcard tests/test_*.c))
PROG_SRC    := $(sort $(wildcard tests/progs/*.c))
BENCH_SRC   := $(sort $(wildcard bench/bench_*.c))

LIBCOMMON = $(BUILD)/lib/libpscommon.a
LIBPOOL   = $(BUILD)/lib/libpool.a
LIBTRACE  = $(BUILD)/lib/libpstrace.a
LIBMODEL  = $(BUILD)/lib/libpsmodel.a
LIBAZ     = $(BUILD)/lib/libanalyzer.a
LIBRP     = $(BUILD)/lib/libreplay.a
LIBENG    = $(BUILD)/lib/libengine.a
PRELOAD   = $(BUILD)/lib/libpoolscope-preload.so
# Link order: users before what they use.
LIBS      = $(LIBENG) $(LIBRP) $(LIBAZ) $(LIBMODEL) $(LIBTRACE) $(LIBPOOL) $(LIBCOMMON)

TESTS  = $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
PROGS  = $(patsubst tests/progs/%.c,$(BUILD)/tests/progs/%,$(PROG_SRC))
BENCHES = $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
BINS   = $(if $(CLI_SRC),$(BUILD)/bin/poolscope) \
         $(if $(wildcard reference-engine/main.c),$(BUILD)/bin/refengine) \
         $(if $(HELPER_SRC),$(BUILD)/bin/poolscope-malloc-helper)

.PHONY: all libs deps test check-unit check-integration check-order asan tsan debug debug-build bench fuzz demo install clean
# A sanitizer build makes the libraries, the CLIs and the unit suites only:
# the preload library and the programs run under it stay plain.
all: libs $(BINS) $(TESTS) $(if $(SAN),,$(if $(PRELOAD_SRC),$(PRELOAD)) $(PROGS) $(BENCHES))
.SECONDARY:
libs: $(LIBS)

deps:
	@sh scripts/deps.sh

# --- objects -----------------------------------------------------------------
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(PIE_CFLAGS) $(call incs,$<) -c $< -o $@

# analyzer/html.c takes the HTML report's script and style into the object
# (.incbin of analyzer/html_app.js and html_app.css): rebuild it when they change.
$(BUILD)/obj/analyzer/html.o: analyzer/html_app.js analyzer/html_app.css

# The preload library is built position-independent with hidden visibility,
# and never with a sanitizer.
$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=%,$(PIC_CFLAGS)) $(call incs,$<) -c $< -o $@

define archive
$(1): $(call objs,$(2))
	@mkdir -p $$(dir $$@)
	@rm -f $$@
	ar rcs $$@ $$^
endef
$(eval $(call archive,$(LIBCOMMON),$(COMMON_SRC)))
$(eval $(call archive,$(LIBPOOL),$(POOL_SRC)))
$(eval $(call archive,$(LIBTRACE),$(TRACE_SRC)))
$(eval $(call archive,$(LIBMODEL),$(MODEL_SRC)))
$(eval $(call archive,$(LIBAZ),$(AZ_SRC)))
$(eval $(call archive,$(LIBRP),$(RP_SRC)))
$(eval $(call archive,$(LIBENG),$(ENG_SRC)))

# The interposer carries its own copy of the format encoder and of the
# column form of compressed EVENTS (compiled PIC).
PRELOAD_OBJ = $(patsubst %.c,$(BUILD)/pic/%.o,$(PRELOAD_SRC) libtrace/format.c libtrace/columns.c)
$(PRELOAD): $(PRELOAD_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -o $@ $^ -Wl,--version-script=libtrace/preload/exports.map \
	    -Wl,-z,nodelete -lunwind -lzstd -ldl -pthread

$(BUILD)/bin/poolscope: $(call objs,$(CLI_SRC)) $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(call objs,$(CLI_SRC)) $(LIBS) $(LDLIBS_ALL)

# The malloc replay policy runs its calls in this helper (replay/pol_malloc.c
# finds it next to the running binary). It measures the real allocator, so
# it is never built with a sanitizer (that would own malloc); it links no
# library of the tree (common/io.c is compiled in plainly).
$(BUILD)/bin/poolscope-malloc-helper: $(HELPER_SRC) common/io.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=%,$(PIE_CFLAGS)) $(INC_replay) -pie -o $@ $(HELPER_SRC) common/io.c -ldl

$(BUILD)/bin/refengine: $(BUILD)/obj/reference-engine/main.o $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(LIBS) $(LDLIBS_ALL)

# test_html counts the allocations of the tree's code (its wrappers of the
# malloc family; libc's own calls are not redirected).
TEST_LDFLAGS_test_html := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free
$(BUILD)/tests/test_%: $(BUILD)/obj/tests/test_%.o $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) $(TEST_LDFLAGS_test_$*) -o $@ $< $(LIBS) -lcmocka $(LDLIBS_ALL)

# Programs run under the interposer: no sanitizer (it would own malloc).
# fake_python exports its symbols, as an interpreter does, for dlsym.
# No -Wmissing-prototypes: their global functions (named frames at fixed
# source lines, an allocator of their own) are what the tests look for.
PROG_LDFLAGS_fake_python := -rdynamic
$(BUILD)/tests/progs/%: tests/progs/%.c $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=% -Wmissing-prototypes,$(PIE_CFLAGS)) $(INC_tests) -pie $(PROG_LDFLAGS_$*) -o $@ $< $(LIBS) $(LDLIBS_ALL)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(LIBS) $(LDLIBS_ALL)

# --- running -----------------------------------------------------------------
# The README's test command. Installs missing packages, checks every include
# against the layer graph (README, "Architecture"), builds everything with
# -Werror, runs every cmocka suite and every integration script.
test: deps
	@sh scripts/check-layers.sh
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory $(DEBUG_VARS) debug-build
	@BUILD=$(BUILD) DEBUG_BUILD=$(DEBUG_BUILD) sh scripts/run-tests.sh all

check-unit: all
	@BUILD=$(BUILD) sh scripts/run-tests.sh unit

check-integration: all
	@BUILD=$(BUILD) sh scripts/run-tests.sh integration

# Leaks, peak and unknown frees of cross-thread programs against their own
# counts and heaptrack's (also part of `make test`), alone.
check-order: all
	@BUILD=$(BUILD) sh tests/integration/truth.sh

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan SAN=address,undefined check-unit

tsan: deps
	@$(MAKE) --no-print-directory BUILD=build/tsan SAN=thread check-unit

# The debug build (common/invariant.h): -DPS_DEBUG=1 at -O1, still -Werror
# (but for -Wmaybe-uninitialized, whose guesses change with the optimizer:
# -O1 flags a variable in rd_version.c that -O2 proves set; the -O2 build
# keeps that warning an error).
# Every pool operation ends with the pool's invariant walker, the model
# checks itself after each event, and pst_next's callers reach it through
# reader.c's check of its output (--wrap). Into build/debug, or
# <BUILD>-debug when BUILD is not the default; DEBUG_BUILD names another.
# Like a sanitizer build it makes the libraries, the CLIs and the unit
# suites only. PS_DEBUG_EVERY=k in the environment walks every k-th
# operation only.
DEBUG_BUILD ?= $(if $(filter build,$(BUILD)),build/debug,$(BUILD)-debug)
DEBUG_VARS   = BUILD=$(DEBUG_BUILD) OPT=-O1 LDFLAGS=-Wl,--wrap=pst_next \
               CFLAGS='-DPS_DEBUG=1 -Wno-maybe-uninitialized'
debug: deps
	@$(MAKE) --no-print-directory $(DEBUG_VARS) debug-build
	@BUILD=$(DEBUG_BUILD) sh scripts/run-tests.sh unit

debug-build: libs $(BINS) $(TESTS)

bench: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh scripts/bench.sh

# The README's first command: records an inference run and looks at it.
demo: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh scripts/demo.sh

# libFuzzer harnesses (clang): the reader and every reading command —
# report, replay (each policy but malloc), sql, export (each format), html,
# plot, diff, gate; FUZZ_SECONDS each (default 600), FUZZ_JOBS at once,
# FUZZ_TARGETS to pick (tests/fuzz/run.sh). The harnesses link the
# libraries as built by this Makefile (with clang and the fuzzer's coverage,
# in $(BUILD)/fuzz/lib), so no source file can be left out of one. The
# build gives the seeds a small refengine trace.
fuzz: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh tests/fuzz/run.sh

# Installs the CLIs, the preload library, the event API and reader headers,
# the trace library (format, reader, writer, event API client, pool adapter)
# and the pool library, with pkg-config files:
#   pkg-config --cflags --libs poolscope       # event API + reader
#   pkg-config --cflags --libs poolscope-pool  # buffer pool + block pool
DESTDIR ?=
INC_HDRS = $(wildcard include/poolscope/*.h)
install: $(BINS) $(PRELOAD) $(LIBTRACE) $(LIBPOOL) $(LIBCOMMON)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/poolscope \
	    $(DESTDIR)$(PREFIX)/include/poolscope $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(PRELOAD) $(DESTDIR)$(PREFIX)/lib/poolscope/
	install -m 644 $(LIBTRACE) $(LIBPOOL) $(LIBCOMMON) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(INC_HDRS) $(DESTDIR)$(PREFIX)/include/poolscope/
	install -d $(DESTDIR)$(PREFIX)/share/doc/poolscope
	install -m 644 libtrace/FORMAT.md analyzer/SCHEMA.md analyzer/REPORT.md $(DESTDIR)$(PREFIX)/share/doc/poolscope/
	sed 's|@PREFIX@|$(PREFIX)|' scripts/poolscope.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/poolscope.pc
	sed 's|@PREFIX@|$(PREFIX)|' scripts/poolscope-pool.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/poolscope-pool.pc

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
