"""Who frees an array variable's buffer. An array name assigned more than once (a loop's
carry) is an `ArrayVar`: stack slots for its data pointer, lengths and whether it owns its
buffer (one a called function allocated, or one allocated for it). An owned buffer is freed
when the variable moves to another one, unless another variable or a call's result holding it
takes it over, and at the function's end; a function returning an array hands its buffer to
the caller where it owns it.
"""
from __future__ import annotations

import ast

from . import functions
from .arrays import VAR, Arrays
from .emit import Array, ArrayVar, NotCovered


# hand-over checks written out in a function; past it, loops over tables. Written out, LLVM's
# instcombine spent 12 of 29 s on HIPS autograd's hmm_em (107 functions of up to 1,000 checks
# each, at 2,000); at 64 its compile took 20 s instead of 38, and fluidsim and convnet ran in
# 17 s and 35 s instead of 24 and 43, their calls included (busy 2-core machine)
UNROLLED = 64
# tj_hand_over(vars, n, skip, old, drop, cells, m): the first array variable (its slots'
# addresses in `vars`, but the one at `skip`) and then the first call site output (its cells'
# in `cells`) that holds `old` takes it over where `drop`; returns whether one did
_HAND_OVER = """define internal i1 @tj_hand_over(ptr %vars, i64 %n, ptr %skip, ptr %old, i1 %drop,
                                     ptr %cells, i64 %m) noinline {
entry:
  %old.i = ptrtoint ptr %old to i64
  br label %var
var:
  %k = phi i64 [0, %entry], [%k.1, %var.next]
  %f = phi i1 [false, %entry], [%f.1, %var.next]
  %more = icmp slt i64 %k, %n
  br i1 %more, label %var.body, label %cell
var.body:
  %ptr.at = getelementptr {ptr, ptr}, ptr %vars, i64 %k, i32 0
  %ptr.slot = load ptr, ptr %ptr.at
  %own.at = getelementptr {ptr, ptr}, ptr %vars, i64 %k, i32 1
  %own.slot = load ptr, ptr %own.at
  %held.ptr = load ptr, ptr %ptr.slot
  %held = icmp eq ptr %held.ptr, %old
  %other = icmp ne ptr %ptr.slot, %skip
  %open = xor i1 %f, true
  %h.1 = and i1 %held, %other
  %h.2 = and i1 %h.1, %open
  %hit = and i1 %h.2, %drop
  %own = load i1, ptr %own.slot
  %own.1 = or i1 %own, %hit
  store i1 %own.1, ptr %own.slot
  %f.1 = or i1 %f, %hit
  br label %var.next
var.next:
  %k.1 = add i64 %k, 1
  br label %var
cell:
  %j = phi i64 [0, %var], [%j.1, %cell.next]
  %g = phi i1 [%f, %var], [%g.1, %cell.next]
  %more.c = icmp slt i64 %j, %m
  br i1 %more.c, label %cell.body, label %done
cell.body:
  %cp.at = getelementptr {ptr, ptr}, ptr %cells, i64 %j, i32 0
  %cp = load ptr, ptr %cp.at
  %co.at = getelementptr {ptr, ptr}, ptr %cells, i64 %j, i32 1
  %co = load ptr, ptr %co.at
  %v = load i64, ptr %cp
  %held.c = icmp eq i64 %v, %old.i
  %open.c = xor i1 %g, true
  %c.1 = and i1 %held.c, %open.c
  %hit.c = and i1 %c.1, %drop
  %o = load i64, ptr %co
  %hit.64 = zext i1 %hit.c to i64
  %o.1 = or i64 %o, %hit.64
  store i64 %o.1, ptr %co
  %g.1 = or i1 %g, %hit.c
  br label %cell.next
cell.next:
  %j.1 = add i64 %j, 1
  br label %cell
done:
  ret i1 %g
}"""


class Ownership(Arrays):
    """Array variables' bindings, and the buffers a function frees."""

    results: list[functions.Results]
    drops: list[tuple[str, str, str]]

    def store_var(self, name: str, node: ast.expr) -> None:
        """`name = <array>` for an array variable: it takes over the buffer where `node` is a
        call's owned output, and frees the buffer it held if it owned that one."""
        f, value = self.fn, self.array(node, name)
        var = self.env.get(name)
        if var is None:
            var = self.env[name] = ArrayVar(
                f.slot("ptr"), f.slot("i1"), tuple(f.slot("i64") for _ in value.dims),
                value.dtype, tuple(d.sym for d in value.dims))
            f.init(f"store ptr null, ptr {var.ptr}")
            f.init(f"store i1 false, ptr {var.owned}")
        if not isinstance(var, ArrayVar) or var.dtype != value.dtype \
                or len(var.dims) != len(value.dims):
            raise NotCovered(f"{name} is bound to arrays of different kinds")
        owned = functions.take(self, value.root) if "#" in value.root else "false"
        if value.root == name and self.mallocs.get(name) == value.ptr:
            # a buffer allocated for the variable: it owns it (one bound to another name
            # first stays that name's)
            self.let_go(self.mallocs.pop(name))
            owned = "true"
        old, was = f.op(f"load ptr, ptr {var.ptr}"), f.op(f"load i1, ptr {var.owned}")
        same = f.op(f"icmp eq ptr {old}, {value.ptr}")
        drop = f.op(f"and i1 {was}, {f.op(f'xor i1 {same}, true')}")
        self.drops.append((old, drop, name))      # freed, or handed over: `_settle_drops`
        f.do(f";@@DROP{len(self.drops) - 1}")
        kept = f.op(f"and i1 {same}, {was}")
        f.do(f"store i1 {f.op(f'or i1 {owned}, {kept}')}, ptr {var.owned}")
        f.do(f"store ptr {value.ptr}, ptr {var.ptr}")
        for slot, d in zip(var.dims, value.dims):
            f.do(f"store i64 {d.ref}, ptr {slot}")

    def hand_over(self, value: Array) -> str:
        """Whether the caller owns `value`'s buffer once this function returns it (an i1):
        one it allocated, an array variable's or a call's owned one; not an argument."""
        root, f = value.root, self.fn
        var = self.env.get(root.removeprefix(VAR))
        if root in self.mallocs and value.ptr == self.mallocs[root]:
            self.let_go(self.mallocs.pop(root))
            return "true"
        if isinstance(var, ArrayVar):
            owned = f.op(f"load i1, ptr {var.owned}")
            f.do(f"store i1 false, ptr {var.owned}")
            return owned
        if "#" in root:
            return functions.take(self, root)
        if isinstance(var, Array) and var.root == root and not self.top:   # an argument
            return "false"
        raise NotCovered(f"a function returning a view or temporary ({root})")

    def _settle_drops(self) -> None:
        """Where an array variable let go of a buffer it owned: another variable or a call's
        result that holds the same buffer takes it over (carries that trade buffers: a swap,
        a rotation, a body returning its argument); where none does, it is freed. Written once
        the function's variables and call sites are all known: unrolled, or where that would
        be more than UNROLLED checks (quadratic: a fluid simulation's step, 71,000 lines of
        them, took LLVM 71 s), as loops over tables of the holders (`_tables`)."""
        f = self.fn
        holders = [(n, v) for n, v in self.env.items() if isinstance(v, ArrayVar)]
        outputs = sum(1 for r in self.results for o in r.layout if o.array)
        tables = self._tables(holders) \
            if len(self.drops) * (len(holders) + outputs) > UNROLLED else None
        for k, (old, drop, name) in enumerate(self.drops):
            at = f.lines.index(f"  ;@@DROP{k}")
            lines, terminated = f.lines, f.terminated
            f.lines, f.terminated, found = [], False, "false"
            if tables is not None:
                skip = next(v.ptr for n, v in holders if n == name)
                found = f.op(f"call i1 @tj_hand_over(ptr {tables[0]}, i64 {len(holders)}, "
                             f"ptr {skip}, ptr {old}, i1 {drop}, ptr {tables[1]}, "
                             f"i64 {outputs})")
            else:
                for other, var in holders:
                    if other != name:
                        found = self._hand(var.ptr, var.owned, old, drop, found)
                for results in self.results:
                    found = functions.adopt(self, results, old, drop, found)
            free = f.op(f"and i1 {drop}, {f.op(f'xor i1 {found}, true')}")
            f.do(f"call void @tj_rt_free(ptr {f.op(f'select i1 {free}, ptr {old}, ptr null')})")
            lines[at:at + 1] = f.lines
            f.lines, f.terminated = lines, terminated

    def _tables(self, holders: list) -> tuple[str, str]:
        """Stack tables of the array variables' slots (pointer, owned flag) and of the call
        sites' array outputs' cells (pointer, owned), for `_HAND_OVER`."""
        f = self.fn
        self.module.declarations.add(_HAND_OVER)
        cells = [(r.cells, o.cell) for r in self.results for o in r.layout if o.array]
        tables = []
        for entries in ([(v.ptr, v.owned) for _, v in holders],
                        [(f.early(f"getelementptr i64, ptr {c}, i64 {k}"),
                          f.early(f"getelementptr i64, ptr {c}, i64 {k + 1}"))
                         for c, k in cells]):
            table = f.slot(f"[{max(1, len(entries))} x {{ptr, ptr}}]")
            for k, (ptr, owned) in enumerate(entries):
                for half, address in enumerate((ptr, owned)):
                    at = f.early(f"getelementptr {{ptr, ptr}}, ptr {table}, i64 {k}, i32 {half}")
                    f.init(f"store ptr {address}, ptr {at}")
            tables.append(table)
        return tables[0], tables[1]

    def _hand(self, ptr_slot: str, owned_slot: str, old: str, drop: str, found: str) -> str:
        """The variable whose slots are given takes over `old` if it holds it and nobody took
        it yet; returns whether somebody has."""
        f = self.fn
        held = f.op(f"icmp eq ptr {f.op(f'load ptr, ptr {ptr_slot}')}, {old}")
        free = f.op(f"xor i1 {found}, true")
        hit = f.op(f"and i1 {drop}, {f.op(f'and i1 {held}, {free}')}")
        owned = f.op(f"or i1 {f.op(f'load i1, ptr {owned_slot}')}, {hit}")
        f.do(f"store i1 {owned}, ptr {owned_slot}")
        return f.op(f"or i1 {found}, {hit}")

    def finish(self) -> None:
        """Free what the function still owns: array variables' and calls' buffers, and its
        top-level allocations; then, where it may leave early, its cleanup block."""
        self._settle_drops()
        self.free_owned(list(self.mallocs.values()))
        if self.cleanup is None:
            return
        f = self.fn
        f.do("ret void")
        f.terminated = True
        f.start(self.cleanup)      # a failure (failures.py): what is held now, read from slots
        self.free_owned([f.op(f"load ptr, ptr {slot}") for slot in self.held.values()])
        for out in self.outputs:   # the caller frees none of the outputs it was not given
            if out.array:
                owned = f.op(f"getelementptr i64, ptr %out, i64 {out.cell + 1}")
                f.do(f"store i64 0, ptr {owned}")

    def free_owned(self, allocated: list[str]) -> None:
        """Free the array variables' and call sites' buffers and the buffers `allocated`."""
        f = self.fn
        for var in [v for v in self.env.values() if isinstance(v, ArrayVar)]:
            owned = f.op(f"load i1, ptr {var.owned}")
            ptr = f.op(f"load ptr, ptr {var.ptr}")
            f.do(f"call void @tj_rt_free(ptr {f.op(f'select i1 {owned}, ptr {ptr}, ptr null')})")
        for results in self.results:
            functions.release(self, results)
        for ptr in allocated:
            f.do(f"call void @tj_rt_free(ptr {ptr})")

    def hold(self, ptr: str) -> None:
        """`ptr` (a buffer just allocated) is held in a slot until let go: the cleanup block
        frees what the slots hold."""
        f, slot = self.fn, self.fn.slot("ptr")
        f.init(f"store ptr null, ptr {slot}")
        f.do(f"store ptr {ptr}, ptr {slot}")
        self.held[ptr] = slot

    def let_go(self, ptr: str) -> None:
        """`ptr` was freed, or another owns it now."""
        self.fn.do(f"store ptr null, ptr {self.held[ptr]}")
