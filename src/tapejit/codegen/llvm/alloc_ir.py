"""The LLVM IR of the runtime module's allocator, `tj_rt_alloc` and `tj_rt_free`, which
generated code calls for every buffer it allocates itself (the entry's top-level arrays are
frames the caller allocates once: lower.py). `tj_rt_alloc(n, status)` returns null where it
gets no memory (or `n` is beyond any machine's), having recorded the failure in the program's
status slots (`status[0] = MEMORY`, `status[1] = n`, unless one is set): the program then
leaves (failures.py).

A buffer of LARGE bytes or more goes back, when freed, into a cache of up to SLOTS blocks and
`tj_rt_cache_limit` bytes (runtime.py sets it), and the next allocation of exactly its size
takes it again. A program's calls allocate the same sizes every time, so from its second call
on they reuse the first call's memory. Without the cache each such buffer was glibc's: a block
over its mmap threshold is mapped fresh and unmapped on free, and a smaller one grows the heap,
which glibc trims again once the top is free. Either way every page faulted in and was zeroed
on every call: HIPS convnet's gradient (a long tape: segments, whose arrays are no frames)
spent 45% of its time in the kernel, 300-550 ms a call against 155-230 ms with the cache.
A free that would pass the limit or find no slot empties the cache first (the blocks of a
program no longer called go back to libc); a block larger than the limit goes straight back;
`tj_rt_cache_clear` empties the cache (`tj.clear_cache`).

Each block has a HEADER of 16 bytes before the pointer the caller gets (malloc's alignment
kept): its size. A spin lock guards the cache: a parallel loop's chunks may allocate too.
"""
from __future__ import annotations

import string

from .failures import MEMORY

EXPORTS = ("tj_rt_alloc", "tj_rt_free", "tj_rt_cache_clear", "tj_rt_cache_limit",
           "tj_rt_cached", "tj_rt_cache_forked")
HEADER = 16             # bytes before each block's data: its size
LARGE = 1 << 17         # bytes: a block at least this large is cached (glibc's mmap threshold)
SLOTS = 256             # blocks cached at most
HUGE = 1 << 62          # bytes: a request for more gets null (no machine has them; the header
                        # must not wrap the size around)

_ALLOC = """
@tj_rt_cache_limit = global i64 0       ; bytes the cache may hold (runtime.py sets it)
@tj_rt_cached = global i64 0            ; bytes it holds
@tj_rt_sizes = internal global [$SLOTS x i64] zeroinitializer    ; each slot's size, 0: empty
@tj_rt_blocks = internal global [$SLOTS x ptr] zeroinitializer
@tj_rt_cache_held = internal global i32 0

declare ptr @malloc(i64)
declare void @free(ptr)

define noalias ptr @tj_rt_alloc(i64 %n, ptr %status) {
entry:
  %huge = icmp ugt i64 %n, $HUGE
  br i1 %huge, label %none, label %sized
sized:
  %total = add i64 %n, $HEADER
  %large = icmp uge i64 %total, $LARGE
  br i1 %large, label %lock, label %new
lock:
  call void @tj_rt_cache_lock()
  br label %look
look:
  %k = phi i64 [0, %lock], [%k.next, %next]
  %size.at = getelementptr [$SLOTS x i64], ptr @tj_rt_sizes, i64 0, i64 %k
  %size = load i64, ptr %size.at
  %hit = icmp eq i64 %size, %total
  br i1 %hit, label %take, label %next
next:
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, $SLOTS
  br i1 %more, label %look, label %miss
take:
  store i64 0, ptr %size.at
  %block.at = getelementptr [$SLOTS x ptr], ptr @tj_rt_blocks, i64 0, i64 %k
  %block = load ptr, ptr %block.at
  %cached = load i64, ptr @tj_rt_cached
  %cached.less = sub i64 %cached, %total
  store i64 %cached.less, ptr @tj_rt_cached
  call void @tj_rt_cache_unlock()
  %kept = getelementptr i8, ptr %block, i64 $HEADER
  ret ptr %kept
miss:
  call void @tj_rt_cache_unlock()
  br label %new
new:
  %p = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %p, null
  br i1 %failed, label %none, label %made
none:                                   ; no memory: recorded unless a failure was already
  %now = load i64, ptr %status
  %first = icmp eq i64 %now, 0
  br i1 %first, label %record, label %null
record:
  store i64 $MEMORY, ptr %status
  %bytes.at = getelementptr i64, ptr %status, i64 1
  store i64 %n, ptr %bytes.at
  br label %null
null:
  ret ptr null
made:
  store i64 %total, ptr %p
  %fresh = getelementptr i8, ptr %p, i64 $HEADER
  ret ptr %fresh
}

define void @tj_rt_free(ptr %data) {
entry:
  %null = icmp eq ptr %data, null
  br i1 %null, label %done, label %block
block:
  %p = getelementptr i8, ptr %data, i64 -$HEADER
  %total = load i64, ptr %p
  %large = icmp uge i64 %total, $LARGE
  br i1 %large, label %lock, label %release
lock:
  %limit = load i64, ptr @tj_rt_cache_limit
  %alone = icmp ule i64 %total, %limit
  br i1 %alone, label %locked, label %release
locked:
  call void @tj_rt_cache_lock()
  %cached = load i64, ptr @tj_rt_cached
  %after = add i64 %cached, %total
  %fits = icmp ule i64 %after, %limit
  br i1 %fits, label %find, label %flush
find:
  %k = phi i64 [0, %locked], [%k.next, %next], [0, %flush]
  %size.at = getelementptr [$SLOTS x i64], ptr @tj_rt_sizes, i64 0, i64 %k
  %size = load i64, ptr %size.at
  %empty = icmp eq i64 %size, 0
  br i1 %empty, label %keep, label %next
next:
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, $SLOTS
  br i1 %more, label %find, label %flush
flush:                                  ; full: the cache emptied, then this block kept
  call void @tj_rt_cache_empty()
  br label %find
keep:
  store i64 %total, ptr %size.at
  %block.at = getelementptr [$SLOTS x ptr], ptr @tj_rt_blocks, i64 0, i64 %k
  store ptr %p, ptr %block.at
  %now = load i64, ptr @tj_rt_cached
  %more.cached = add i64 %now, %total
  store i64 %more.cached, ptr @tj_rt_cached
  call void @tj_rt_cache_unlock()
  br label %done
release:
  call void @free(ptr %p)
  br label %done
done:
  ret void
}

define void @tj_rt_cache_clear() {
  call void @tj_rt_cache_lock()
  call void @tj_rt_cache_empty()
  call void @tj_rt_cache_unlock()
  ret void
}

; every cached block back to libc (the lock held)
define internal void @tj_rt_cache_empty() {
entry:
  br label %slot
slot:
  %k = phi i64 [0, %entry], [%k.next, %next]
  %size.at = getelementptr [$SLOTS x i64], ptr @tj_rt_sizes, i64 0, i64 %k
  %size = load i64, ptr %size.at
  %held = icmp ne i64 %size, 0
  br i1 %held, label %give, label %next
give:
  %block.at = getelementptr [$SLOTS x ptr], ptr @tj_rt_blocks, i64 0, i64 %k
  %block = load ptr, ptr %block.at
  call void @free(ptr %block)
  store i64 0, ptr %size.at
  br label %next
next:
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, $SLOTS
  br i1 %more, label %slot, label %done
done:
  store i64 0, ptr @tj_rt_cached
  ret void
}

; in a forked child (runtime.py calls it): the lock free, the cache forgotten (a thread of the
; parent may have been changing it; its blocks stay allocated, never reused)
define void @tj_rt_cache_forked() {
  store i32 0, ptr @tj_rt_cache_held
  store i64 0, ptr @tj_rt_cached
  call void @llvm.memset.p0.i64(ptr @tj_rt_sizes, i8 0, i64 $SIZES_BYTES, i1 false)
  ret void
}

define internal void @tj_rt_cache_lock() {
entry:
  br label %try
try:
  %swap = cmpxchg ptr @tj_rt_cache_held, i32 0, i32 1 acquire monotonic
  %got = extractvalue { i32, i1 } %swap, 1
  br i1 %got, label %done, label %try
done:
  ret void
}

define internal void @tj_rt_cache_unlock() {
  store atomic i32 0, ptr @tj_rt_cache_held release, align 4
  ret void
}

declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
"""


def source() -> str:
    """The allocator's IR text."""
    return string.Template(_ALLOC).substitute(HEADER=HEADER, LARGE=LARGE, SLOTS=SLOTS,
                                              HUGE=HUGE, MEMORY=MEMORY, SIZES_BYTES=8 * SLOTS)
