"""The LLVM IR of the runtime module's parallel loops, `tj_rt_parallel_for` and its thread
pool (runtime.py's docstring says how they work): POSIX threads, a mutex and two conditions
from libc, C11-style atomics, nothing from Python or numba.
"""
from __future__ import annotations

import platform
import string
import sys

from ...threads import POOL_NAME    # each pool thread's name (Linux: threads.py tells them apart)

EXPORTS = ("tj_rt_parallel_for", "tj_rt_pool_size", "tj_rt_forked")
ITEMS = 4096        # a job's items at most (a larger job's chunks are run in runs of them)
SPINS = 100000      # pauses a waiting thread spins for while a program runs (1.3 ms here)
IDLE_SPINS = 2000   # pauses it spins for once no program runs (26 us here): then it sleeps
SYNC = 128          # bytes kept for a pthread mutex or condition (glibc: 40, 48; macOS: 64)
# a spinning thread's pause instruction, by architecture
_PAUSES = {"x86_64": ("declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"),
           "aarch64": ("declare void @llvm.aarch64.hint(i32)",
                       "call void @llvm.aarch64.hint(i32 1)")}

_PARALLEL_FOR = """
%job = type { ptr, ptr, i64, i64 }   ; fn, ctx, n, chunks

@tj_rt_pool_size = global i64 1         ; threads a job may use, the caller's included
@tj_rt_job = internal global %job zeroinitializer
@tj_rt_ticket = internal global i64 0   ; epoch << 32 | items << 16 | the next item
@tj_rt_left = internal global i64 0     ; the job's items not finished
@tj_rt_busy = internal global i32 0     ; 1 while a job runs on the pool
@tj_rt_workers = internal global i64 0  ; threads started (reset in a forked child)
@tj_rt_ready = internal global i32 0    ; the lock and conditions are initialised
@tj_rt_calls = internal global i64 0    ; program calls running (tj_rt_call counts them)
@tj_rt_lock = internal global [$SYNC x i8] zeroinitializer, align 16
@tj_rt_wake = internal global [$SYNC x i8] zeroinitializer, align 16   ; a new epoch
@tj_rt_done = internal global [$SYNC x i8] zeroinitializer, align 16   ; left reached 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_mutex_init(ptr, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_init(ptr, ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_cond_signal(ptr)
$PAUSE_DECLARE

define void @tj_rt_parallel_for(ptr %fn, ptr %ctx, i64 %n, i64 %chunks) {
entry:
  %job = alloca %job
  %many = icmp sgt i64 %chunks, 1
  %chunks.1 = select i1 %many, i64 %chunks, i64 1
  %items.0 = call i64 @llvm.umin.i64(i64 %chunks.1, i64 $ITEMS)
  %size = load atomic i64, ptr @tj_rt_pool_size monotonic, align 8
  %threaded = icmp sgt i64 %size, 1
  %wanted = and i1 %many, %threaded
  br i1 %wanted, label %take, label %here
take:                                   ; the pool, unless another job holds it
  %taken = cmpxchg ptr @tj_rt_busy, i32 0, i32 1 acquire monotonic
  %ours = extractvalue { i32, i1 } %taken, 1
  br i1 %ours, label %grow, label %here
grow:
  %old = load atomic i64, ptr @tj_rt_ticket monotonic, align 8
  %epoch.old = lshr i64 %old, 32
  %helpers.want = call i64 @llvm.umin.i64(i64 %items.0, i64 %size)
  %helpers.need = sub i64 %helpers.want, 1
  %helpers = call i64 @tj_rt_grow(i64 %helpers.need, i64 %epoch.old)
  %alone = icmp eq i64 %helpers, 0
  br i1 %alone, label %release, label %publish
publish:
  store ptr %fn, ptr @tj_rt_job
  %ctx.at = getelementptr %job, ptr @tj_rt_job, i32 0, i32 1
  store ptr %ctx, ptr %ctx.at
  %n.at = getelementptr %job, ptr @tj_rt_job, i32 0, i32 2
  store i64 %n, ptr %n.at
  %chunks.at = getelementptr %job, ptr @tj_rt_job, i32 0, i32 3
  store i64 %chunks.1, ptr %chunks.at
  store atomic i64 %items.0, ptr @tj_rt_left monotonic, align 8
  %epoch = add i64 %epoch.old, 1
  %epoch.bits = shl i64 %epoch, 32
  %items.bits = shl i64 %items.0, 16
  %ticket = or i64 %epoch.bits, %items.bits
  store atomic i64 %ticket, ptr @tj_rt_ticket seq_cst, align 8
  call i32 @pthread_mutex_lock(ptr @tj_rt_lock)
  call i32 @pthread_cond_broadcast(ptr @tj_rt_wake)
  call i32 @pthread_mutex_unlock(ptr @tj_rt_lock)
  call void @tj_rt_items(i64 %epoch)
  call void @tj_rt_finished()
  br label %release
release:
  store atomic i32 0, ptr @tj_rt_busy release, align 4
  br i1 %alone, label %here, label %done
here:
  store ptr %fn, ptr %job
  %ctx.here = getelementptr %job, ptr %job, i32 0, i32 1
  store ptr %ctx, ptr %ctx.here
  %n.here = getelementptr %job, ptr %job, i32 0, i32 2
  store i64 %n, ptr %n.here
  %chunks.here = getelementptr %job, ptr %job, i32 0, i32 3
  store i64 %chunks.1, ptr %chunks.here
  call void @tj_rt_chunks(ptr %job, i64 0, i64 %chunks.1)
  br label %done
done:
  ret void
}

; start workers until `want` run (each told the epoch before its first job); how many run
define internal i64 @tj_rt_grow(i64 %want, i64 %epoch) {
entry:
  %tid = alloca i64
  %ready = load i32, ptr @tj_rt_ready
  %fresh = icmp eq i32 %ready, 0
  br i1 %fresh, label %init, label %count
init:
  call i32 @pthread_mutex_init(ptr @tj_rt_lock, ptr null)
  call i32 @pthread_cond_init(ptr @tj_rt_wake, ptr null)
  call i32 @pthread_cond_init(ptr @tj_rt_done, ptr null)
  store i32 1, ptr @tj_rt_ready
  br label %count
count:
  %have.0 = load i64, ptr @tj_rt_workers
  br label %check
check:
  %have = phi i64 [%have.0, %count], [%have.next, %start]
  %enough = icmp sge i64 %have, %want
  br i1 %enough, label %out, label %start.try
start.try:
  %arg = inttoptr i64 %epoch to ptr
  %failed = call i32 @pthread_create(ptr %tid, ptr null, ptr @tj_rt_worker, ptr %arg)
  %ok = icmp eq i32 %failed, 0
  br i1 %ok, label %start, label %out
start:
  %have.next = add i64 %have, 1
  store i64 %have.next, ptr @tj_rt_workers
  br label %check
out:
  %have.out = phi i64 [%have, %check], [%have, %start.try]
  ret i64 %have.out
}

; in a forked child (runtime.py calls it): no workers, a lock and conditions made anew
define void @tj_rt_forked() {
  store i64 0, ptr @tj_rt_workers
  store i32 0, ptr @tj_rt_ready
  store i32 0, ptr @tj_rt_busy
  ret void
}

; a worker: named, waits for a new epoch (spinning, then asleep), runs items of its job, again
define internal ptr @tj_rt_worker(ptr %arg) {
entry:
  %first = ptrtoint ptr %arg to i64
  $NAME_THREAD
  br label %wait
wait:
  %seen = phi i64 [%first, %entry], [%epoch, %work]
  br label %spin
spin:
  %k = phi i64 [0, %wait], [%k.next, %pause]
  %t = load atomic i64, ptr @tj_rt_ticket acquire, align 8
  %e = lshr i64 %t, 32
  %new = icmp ne i64 %e, %seen
  br i1 %new, label %work, label %pause
pause:
  $PAUSE
  %k.next = add i64 %k, 1
  %calls = load atomic i64, ptr @tj_rt_calls monotonic, align 8
  %running = icmp ne i64 %calls, 0
  %spins = select i1 %running, i64 $SPINS, i64 $IDLE_SPINS
  %patient = icmp slt i64 %k.next, %spins
  br i1 %patient, label %spin, label %sleep
sleep:
  call i32 @pthread_mutex_lock(ptr @tj_rt_lock)
  br label %asleep
asleep:
  %t.s = load atomic i64, ptr @tj_rt_ticket seq_cst, align 8
  %e.s = lshr i64 %t.s, 32
  %woken = icmp ne i64 %e.s, %seen
  br i1 %woken, label %awake, label %doze
doze:
  call i32 @pthread_cond_wait(ptr @tj_rt_wake, ptr @tj_rt_lock)
  br label %asleep
awake:
  call i32 @pthread_mutex_unlock(ptr @tj_rt_lock)
  br label %work
work:
  %epoch = phi i64 [%e, %spin], [%e.s, %awake]
  call void @tj_rt_items(i64 %epoch)
  br label %wait
}

; take the items of the job of `epoch` one by one while there are any; the job's fields stay
; as they are while an item taken is not finished (its caller waits for `left` to reach 0)
define internal void @tj_rt_items(i64 %epoch) {
entry:
  br label %next
next:
  %t = load atomic i64, ptr @tj_rt_ticket acquire, align 8
  %e = lshr i64 %t, 32
  %current = icmp eq i64 %e, %epoch
  %item = and i64 %t, 65535
  %items.at = lshr i64 %t, 16
  %items = and i64 %items.at, 65535
  %some = icmp ult i64 %item, %items
  %go = and i1 %current, %some
  br i1 %go, label %claim, label %out
claim:
  %t.next = add i64 %t, 1
  %swap = cmpxchg ptr @tj_rt_ticket, i64 %t, i64 %t.next acq_rel acquire
  %won = extractvalue { i64, i1 } %swap, 1
  br i1 %won, label %run, label %next
run:
  %chunks.at = getelementptr %job, ptr @tj_rt_job, i32 0, i32 3
  %chunks = load i64, ptr %chunks.at
  %lo = call i64 @tj_rt_bound(i64 %item, i64 %chunks, i64 %items)
  %item.next = add i64 %item, 1
  %hi = call i64 @tj_rt_bound(i64 %item.next, i64 %chunks, i64 %items)
  %count = sub i64 %hi, %lo
  call void @tj_rt_chunks(ptr @tj_rt_job, i64 %lo, i64 %count)
  %left = atomicrmw sub ptr @tj_rt_left, i64 1 acq_rel
  %last = icmp eq i64 %left, 1
  br i1 %last, label %tell, label %next
tell:
  call i32 @pthread_mutex_lock(ptr @tj_rt_lock)
  call i32 @pthread_cond_signal(ptr @tj_rt_done)
  call i32 @pthread_mutex_unlock(ptr @tj_rt_lock)
  br label %next
out:
  ret void
}

; the caller: wait until every item of its job is finished (spinning, then asleep)
define internal void @tj_rt_finished() {
entry:
  br label %spin
spin:
  %k = phi i64 [0, %entry], [%k.next, %pause]
  %left = load atomic i64, ptr @tj_rt_left acquire, align 8
  %none = icmp eq i64 %left, 0
  br i1 %none, label %out, label %pause
pause:
  $PAUSE
  %k.next = add i64 %k, 1
  %patient = icmp slt i64 %k.next, $SPINS
  br i1 %patient, label %spin, label %sleep
sleep:
  call i32 @pthread_mutex_lock(ptr @tj_rt_lock)
  br label %asleep
asleep:
  %left.s = load atomic i64, ptr @tj_rt_left acquire, align 8
  %none.s = icmp eq i64 %left.s, 0
  br i1 %none.s, label %awake, label %doze
doze:
  call i32 @pthread_cond_wait(ptr @tj_rt_done, ptr @tj_rt_lock)
  br label %asleep
awake:
  call i32 @pthread_mutex_unlock(ptr @tj_rt_lock)
  br label %out
out:
  ret void
}

declare i64 @llvm.umin.i64(i64, i64)

; chunks first .. first+count-1 of the job, one after the other
define internal void @tj_rt_chunks(ptr %job, i64 %first, i64 %count) {
entry:
  %fn = load ptr, ptr %job
  %ctx.at = getelementptr %job, ptr %job, i32 0, i32 1
  %ctx = load ptr, ptr %ctx.at
  %n.at = getelementptr %job, ptr %job, i32 0, i32 2
  %n = load i64, ptr %n.at
  %chunks.at = getelementptr %job, ptr %job, i32 0, i32 3
  %chunks = load i64, ptr %chunks.at
  %end = add i64 %first, %count
  %empty = icmp sle i64 %count, 0
  br i1 %empty, label %done, label %chunk
chunk:
  %c = phi i64 [%first, %entry], [%c.next, %chunk]
  %c.next = add i64 %c, 1
  %lo = call i64 @tj_rt_bound(i64 %c, i64 %n, i64 %chunks)
  %hi = call i64 @tj_rt_bound(i64 %c.next, i64 %n, i64 %chunks)
  call void %fn(ptr %ctx, i64 %c, i64 %lo, i64 %hi)
  %more = icmp slt i64 %c.next, %end
  br i1 %more, label %chunk, label %done
done:
  ret void
}

; c*n//chunks without overflow: c*(n//chunks) + c*(n%chunks)//chunks
define internal i64 @tj_rt_bound(i64 %c, i64 %n, i64 %chunks) {
  %q = udiv i64 %n, %chunks
  %r = urem i64 %n, %chunks
  %whole = mul i64 %c, %q
  %part.n = mul i64 %c, %r
  %part = udiv i64 %part.n, %chunks
  %bound = add i64 %whole, %part
  ret i64 %bound
}
"""


def source() -> str:
    """The parallel loops' IR text, with the host's pause instruction (and, on Linux, the
    threads' name)."""
    machine = platform.machine().lower()
    declare, pause = _PAUSES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine),
                                 ("", ""))
    name, naming = "", ""
    if sys.platform.startswith("linux"):        # glibc: pthread_setname_np(pthread_t, name)
        name = (f'@tj_rt_name = private unnamed_addr constant [{len(POOL_NAME) + 1} x i8] '
                f'c"{POOL_NAME}\\00"\n'
                "declare i64 @pthread_self()\ndeclare i32 @pthread_setname_np(i64, ptr)\n")
        naming = ("%self = call i64 @pthread_self()\n"
                  "  %named = call i32 @pthread_setname_np(i64 %self, ptr @tj_rt_name)")
    return name + string.Template(_PARALLEL_FOR).substitute(
        ITEMS=ITEMS, SPINS=SPINS, IDLE_SPINS=IDLE_SPINS, SYNC=SYNC, PAUSE=pause,
        PAUSE_DECLARE=declare, NAME_THREAD=naming)
