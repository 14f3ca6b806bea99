"""llama.cpp's compute buffer: its graph allocator run over the worst-case graph of one ubatch.

This module owns :func:`compute_buffer`. llama.cpp sizes a backend's compute buffer when it
creates a context: it builds the graph of one ubatch (``n_ubatch`` tokens, every one an output),
then the graph of one token per sequence, and lets ggml's graph allocator (``ggml-alloc.c``) place
every intermediate tensor of each; the buffer is the largest end address either placement
reached. The allocator is deterministic, so this module runs the same algorithm over the same
sequence of tensors, built here from the model's shapes:

* the allocator: a free list kept in address order; a tensor takes the smallest free block that
  fits (the last block, which can grow, only when none does); a freed block merges with its
  neighbours; sizes rounded up to the buffer's alignment (32 bytes on the CPU);
* the graph: the nodes in the order ``ggml_build_forward_expand`` lists them (operands first, in
  operand order); graph inputs (token ids, positions, KV masks and row indices, output ids) are
  placed first; a tensor is freed after its last consumer, except the graph's outputs (logits and
  the final norm); element-wise ops (add, mul, scale, norms, rope, softmax, unary) reuse their
  operand's memory when it has no other consumer; views take no memory.

* the devices (``layer_devices``, with layers offloaded): ggml-backend's scheduler puts an op
  where its first weight, or the cache it writes, lives and graph inputs on the CPU; the other
  ops take their neighbours' device (offload devices spreading first, down then up the graph);
  each run of ops on one device starts by copying there what it reads from another device, the
  copy freed after its last use, the original kept to the end. Each device has its own allocator.

The graph follows llama.cpp's llama, phi3, gemma2/gemma3, mamba and mixture-of-experts builders;
other attention decoders are approximated by the llama graph (their extra element-wise ops are
mostly in place). Everything here is plain arithmetic over shapes: milliseconds per graph.

>>> s = ComputeShapes(n_embd=256, n_ff=512, n_vocab=32000, n_head=[4] * 2, n_head_kv=[2] * 2, head_k=64,
...                   head_v=64, n_kv=[512] * 2, n_tokens=64, n_seqs=1, flash_attn=True)
>>> r = compute_buffer(s)   # the logits (32000 x 64 floats) placed above what is still in use
>>> r.peak_at["CPU"], r.peak_tensor["CPU"] == 32000 * 64 * 4, r.peak["CPU"] - r.peak_tensor["CPU"]
('result_output', True, 131328)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..format.nodes import align_offset

__all__ = ["ComputeResult", "ComputeShapes", "compute_buffer"]

_ALIGN = 32  # ggml's TENSOR_ALIGNMENT: the CPU buffer type's alignment

#: ggml ops the allocator may run in place (ggml_op_can_inplace)
_INPLACE = frozenset(
    {"scale", "add", "mul", "div", "sub", "sqr", "sqrt", "log", "unary", "rope", "rms_norm", "clamp", "soft_max"}
)


@dataclass
class ComputeShapes:
    """The shapes the graph of one ubatch is built from (per layer lists have one entry per layer).

    ``n_kv`` is each layer's KV cells per stream as the reserve graph sees them (the whole cache);
    ``n_tokens`` the ubatch; ``n_outputs`` the logits rows (``n_tokens`` when None).
    """

    n_embd: int
    n_ff: int
    n_vocab: int
    n_head: Sequence[int]
    n_head_kv: Sequence[int]
    head_k: int
    head_v: int
    n_kv: Sequence[int]
    n_tokens: int
    n_seqs: int
    flash_attn: bool
    n_outputs: int | None = None
    kv_unified: bool = False
    family: str = "llama"  # "llama", "gemma3", "gemma2"
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    qk_norm: bool = False
    qkv_bias: bool = False
    fused_qkv: bool = False
    v_trans_width: int = 0  # widest V row (for the transposed V cache's row indices without flash attention)
    k_rot: bool = False  # a quantized K cache: Q and K rotated by a Hadamard matrix
    v_rot: bool = False
    swa: Sequence[bool] = field(default_factory=list)
    layer_devices: Sequence[str] = ()  # device of each layer and, last, of the output layer (all "CPU" if empty)
    ssm: tuple[int, int, int, int] = (0, 0, 0, 0)  # mamba: d_conv, d_inner, d_state, dt_rank
    ffn_kind: str = "gated"  # "gated" (gate and up), "fused" (one matrix for both, phi3), "plain" (no gate)


@dataclass(frozen=True)
class ComputeResult:
    """The allocator's peak (bytes) per device, the tensor whose placement reached it and that tensor's size
    (the rest of the peak is the memory below it: tensors still alive, and holes too small for it)."""

    peak: dict[str, int]
    peak_at: dict[str, str]
    nodes: int
    peak_tensor: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- the graph


class _T:
    __slots__ = ("contig", "dev", "flags", "n_children", "n_views", "name", "nbytes", "ne", "op", "src", "view_src")

    device = "CPU"  # where the builder is: the device of every tensor created now

    def __init__(
        self,
        name: str,
        op: str,
        ne: tuple[int, ...],
        esize: float,
        src: tuple[_T, ...] = (),
        view_src: _T | None = None,
        flags: str = "",
        contig: bool = True,
    ):
        self.name = name
        self.op = op
        self.ne = ne
        n = 1
        for x in ne:
            n *= x
        self.nbytes = int(n * esize)
        self.src = src
        root: _T | None = view_src
        if view_src is not None and view_src.view_src is not None:
            root = view_src.view_src
        self.view_src: _T | None = root
        self.flags = flags  # "i": graph input, "o": graph output, "x": external (weights, caches)
        self.contig = contig
        self.n_children = 0
        self.n_views = 0
        self.dev = _T.device if "i" not in flags else "CPU"  # graph inputs are set on the host


class _Graph:
    """The nodes and leafs of one ggml graph, in the order ggml_build_forward_expand lists them."""

    def __init__(self) -> None:
        self.nodes: list[_T] = []
        self.leafs: list[_T] = []
        self._seen: set[int] = set()

    def expand(self, t: _T) -> None:
        stack: list[tuple[_T, int]] = [(t, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                if id(node) in self._seen:
                    continue
                self._seen.add(id(node))
            if i < len(node.src):
                stack.append((node, i + 1))
                src = node.src[i]
                if id(src) not in self._seen:
                    stack.append((src, 0))
                continue
            (self.leafs if node.op == "none" else self.nodes).append(node)


def _f32(name: str, op: str, ne: tuple[int, ...], *src: _T) -> _T:
    return _T(name, op, ne, 4, tuple(src))


def _view(a: _T, ne: tuple[int, ...], contig: bool = True) -> _T:
    return _T(a.name + "_view", "view", ne, 0, (a,), view_src=a, flags="x" if "x" in a.flags else "", contig=contig)


def _input(name: str, ne: tuple[int, ...], esize: float) -> _T:
    return _T(name, "none", ne, esize, flags="i")


def _weight(name: str) -> _T:
    return _T(name, "none", (1,), 0, flags="x")


class _Builder:
    """llama.cpp's graph for one ubatch, from :class:`ComputeShapes`."""

    def __init__(self, s: ComputeShapes):
        self.s = s
        self.g = _Graph()
        self.T = s.n_tokens
        self.n_out = s.n_outputs if s.n_outputs is not None else s.n_tokens
        self.n_stream = 1 if s.kv_unified else s.n_seqs
        self.masks: dict[bool, _T] = {}
        self.idxs: dict[bool, tuple[_T, _T]] = {}
        self.rots: dict[str, _T] = {}

    # ------------------------------------------------------------------ pieces

    def norm(self, x: _T, name: str) -> _T:
        n = _f32(name, "rms_norm", x.ne, x)
        return _f32(name + "_w", "mul", x.ne, n, _weight(name + ".weight"))

    def mm(self, w: str, x: _T, rows: int) -> _T:
        return _f32(w, "mul_mat", (rows, *x.ne[1:]), _weight(w), x)

    def kv_inputs(self, swa: bool) -> tuple[_T, _T]:
        if swa not in self.idxs:
            s = self.s
            v_rows = self.T * s.v_trans_width if not s.flash_attn else self.T
            self.idxs[swa] = (_input("k_idxs", (self.T,), 8), _input("v_idxs", (v_rows,), 8))
        return self.idxs[swa]

    def mask(self, n_kv: int, swa: bool) -> _T:
        """The KQ mask (one for the full-attention cache, one for the sliding-window cache)."""
        if swa not in self.masks:
            esize = 2 if self.s.flash_attn else 4
            self.masks[swa] = _input("kq_mask", (n_kv, self.T // self.n_stream, 1, self.n_stream), esize)
        return self.masks[swa]

    def attention(self, il: int, cur: _T, pos: _T) -> _T:
        s, T, g = self.s, self.T, self.g
        n_head, n_head_kv = s.n_head[il], s.n_head_kv[il]
        dq, dk, dv = n_head * s.head_k, n_head_kv * s.head_k, n_head_kv * s.head_v
        if s.fused_qkv:
            qkv = self.mm("wqkv", cur, dq + dk + dv)
            q = _view(qkv, (s.head_k, n_head, T), contig=False)
            k = _view(qkv, (s.head_k, n_head_kv, T), contig=False)
            v = _view(qkv, (s.head_v, n_head_kv, T), contig=False)
        else:
            q, k, v = self.mm("wq", cur, dq), self.mm("wk", cur, dk), self.mm("wv", cur, dv)
            if s.qkv_bias:
                q = _f32("q_b", "add", q.ne, q, _weight("bq"))
                k = _f32("k_b", "add", k.ne, k, _weight("bk"))
                v = _f32("v_b", "add", v.ne, v, _weight("bv"))
            q = _view(q, (s.head_k, n_head, T))
            k = _view(k, (s.head_k, n_head_kv, T))
            v = _view(v, (s.head_v, n_head_kv, T))
        if s.qk_norm:
            q = self.norm(q, "q_norm")
        q = _f32("Qcur", "rope", q.ne, q, pos)
        if s.qk_norm:
            k = self.norm(k, "k_norm")
        k = _f32("Kcur", "rope", k.ne, k, pos)
        if s.family in ("gemma2", "gemma3", "phi3"):
            q = _f32("Qscaled", "scale", q.ne, q)
        if s.k_rot:
            q = self.hadamard(q, self.rot("k"))
            k = self.hadamard(k, self.rot("k"))
        if s.v_rot:
            v = self.hadamard(v, self.rot("v"))
        g.expand(q)
        g.expand(v)
        g.expand(k)
        swa = bool(s.swa and s.swa[il])
        k_idxs, v_idxs = self.kv_inputs(swa)
        kc, vc = _weight("k_cache"), _weight("v_cache")
        g.expand(_T("k_set", "set_rows", (1,), 0, (kc, _view(k, (dk, T)), k_idxs), view_src=kc, flags="x"))
        v2: _T = v if s.flash_attn or v.contig else _f32("v_cont", "cont", (dv, T), v)
        g.expand(_T("v_set", "set_rows", (1,), 0, (vc, _view(v2, (dv, T)), v_idxs), view_src=vc, flags="x"))
        n_kv = s.n_kv[il]
        ns = self.n_stream
        qv = _view(q, (s.head_k, T // ns, n_head, ns), contig=False)
        kv_k = _view(kc, (s.head_k, n_kv, n_head_kv, ns))
        kv_v = _view(vc, (s.head_v, n_kv, n_head_kv, ns))
        mask = self.mask(n_kv, swa)
        if s.flash_attn:
            out = _f32("fattn", "flash_attn_ext", (s.head_v, n_head, T // ns, ns), qv, kv_k, kv_v, mask)
            cur = _view(out, (s.head_v * n_head, T))
        else:
            kq = _f32("kq", "mul_mat", (n_kv, T // ns, n_head, ns), kv_k, qv)
            if s.family == "gemma2":  # attention logit soft-capping: scale, tanh, scale (in place)
                kq = _f32("kq_scaled", "scale", kq.ne, kq)
                kq = _f32("kq_tanh", "unary", kq.ne, kq)
                kq = _f32("kq_scaled2", "scale", kq.ne, kq)
            kq = _f32("kq_soft_max", "soft_max", kq.ne, kq, mask)
            kqv = _f32("kqv", "mul_mat", (s.head_v, T // ns, n_head, ns), kv_v, kq)
            cur = _f32("kqv_cont", "cont", (s.head_v * n_head, T), _view(kqv, kqv.ne, contig=False))
        g.expand(cur)
        if s.v_rot:
            cur = self.hadamard(cur, self.rot("v"))
        return self.mm("wo", cur, s.n_embd)

    def rot(self, which: str) -> _T:
        """The Hadamard matrix of a quantized cache (a graph input): 64 x 64 for V; for K the largest power
        of two from 64 dividing the head size."""
        if which not in self.rots:
            n = 64
            if which == "k":
                while self.s.head_k % (n * 2) == 0:
                    n *= 2
            self.rots[which] = _input(f"attn_inp_{which}_rot", (n, n), 4)
        return self.rots[which]

    def hadamard(self, x: _T, rot: _T) -> _T:
        if not x.contig:
            x = _f32("rot_cont", "cont", x.ne, x)
        return _f32("rot", "mul_mat", x.ne, rot, _view(x, x.ne))

    def ffn(self, cur: _T) -> _T:
        s = self.s
        if s.n_expert:
            return self.moe(cur)
        if s.ffn_kind == "fused":  # one matrix for gate and up (phi3): a GLU over its two halves
            up = self.mm("ffn_up", cur, s.n_ff)
            act = _f32("ffn_glu", "glu", (s.n_ff // 2, *up.ne[1:]), up)
        elif s.ffn_kind == "plain":  # no gate: an activation in place
            act = _f32("ffn_act", "unary", (s.n_ff, self.T), self.mm("ffn_up", cur, s.n_ff))
        else:
            up = self.mm("ffn_up", cur, s.n_ff)
            gate = self.mm("ffn_gate", cur, s.n_ff)
            act = _f32("ffn_glu", "glu", up.ne, gate, up)
        return self.mm("ffn_down", act, s.n_embd)

    def moe(self, cur: _T) -> _T:
        s, T, g = self.s, self.T, self.g
        ne, nu, nf = s.n_expert, s.n_expert_used, s.n_ff_exp or s.n_ff
        logits = self.mm("ffn_gate_inp", cur, ne)
        probs = _f32("probs", "soft_max", logits.ne, logits)
        sel = _view(_T("argsort", "argsort", (ne, T), 4, (probs,)), (nu, T))
        weights = _f32("weights", "get_rows", (1, nu, T), _view(probs, (1, ne, T)), sel)
        w2 = _view(weights, (nu, T))
        wsum = _f32("weights_sum", "sum_rows", (1, T), w2)
        wsum = _f32("weights_sum_c", "clamp", wsum.ne, wsum)
        weights = _view(_f32("weights_norm", "div", (nu, T), w2, wsum), (1, nu, T))
        g.expand(weights)
        x = _view(cur, (s.n_embd, 1, T))
        up = _f32("up_exps", "mul_mat_id", (nf, nu, T), _weight("up_exps"), x, sel)
        gate = _f32("gate_exps", "mul_mat_id", (nf, nu, T), _weight("gate_exps"), x, sel)
        act = _f32("moe_glu", "glu", (nf, nu, T), gate, up)
        experts = _f32("down_exps", "mul_mat_id", (s.n_embd, nu, T), _weight("down_exps"), act, sel)
        experts = _f32("experts_w", "mul", experts.ne, experts, weights)
        g.expand(experts)
        views = [_view(experts, (s.n_embd, T), contig=False) for _ in range(nu)]
        for v in views:
            g.expand(v)
        out = views[0]
        for v in views[1:]:
            out = _f32("moe_add", "add", (s.n_embd, T), out, v)
            g.expand(out)
        if nu == 1:
            out = _f32("moe_cont", "cont", (s.n_embd, T), out)
        return out

    def mamba(self, cur: _T, s_copy: _T) -> _T:
        """llama.cpp's build_mamba_layer: input projection, causal convolution, selective scan, gate, output."""
        s, g = self.s, self.g
        d_conv, d_inner, d_state, dt_rank = s.ssm
        ns = s.n_seqs
        nst = self.T // ns
        conv_states, ssm_states = _weight("conv_states"), _weight("ssm_states")
        g.expand(_T("conv_zero", "scale", (1,), 0, (conv_states,), view_src=conv_states, flags="x"))
        conv = _f32("conv_rows", "get_rows", ((d_conv - 1) * d_inner, ns), conv_states, _view(s_copy, (ns,)))
        g.expand(conv)
        x3 = _view(cur, (s.n_embd, nst, ns))
        xz = _f32("ssm_in", "mul_mat", (2 * d_inner, nst, ns), _weight("ssm_in"), x3)
        x = _view(xz, (d_inner, nst, ns), contig=False)
        z = _view(xz, (d_inner, nst, ns), contig=False)
        conv_x = _f32("conv_x", "concat", (d_conv - 1 + nst, d_inner, ns), _view(conv, (d_conv - 1, d_inner, ns)), x)
        g.expand(_T("conv_store", "cpy", (1,), 0, (_view(conv_x, (1,), contig=False), conv_states), flags="x"))
        x = _f32("ssm_conv", "ssm_conv", (d_inner, nst, ns), conv_x, _weight("ssm_conv1d"))
        x = _f32("ssm_conv_b", "add", x.ne, x, _weight("ssm_conv1d_b"))
        x = _f32("ssm_conv_silu", "unary", x.ne, x)
        x_db = _f32("ssm_x", "mul_mat", (dt_rank + 2 * d_state, nst, ns), _weight("ssm_x"), x)
        dt = _f32("ssm_dt", "mul_mat", (d_inner, nst, ns), _weight("ssm_dt"), _view(x_db, (dt_rank, nst, ns), False))
        dt = _f32("ssm_dt_b", "add", dt.ne, dt, _weight("ssm_dt_b"))
        g.expand(_T("ssm_zero", "scale", (1,), 0, (ssm_states,), view_src=ssm_states, flags="x"))
        bview, cview = _view(x_db, (d_state, 1, nst, ns), False), _view(x_db, (d_state, 1, nst, ns), False)
        scan = _f32(
            "ssm_scan",
            "ssm_scan",
            (d_inner * nst * ns + d_state * d_inner * ns,),
            ssm_states,
            _view(x, (1, d_inner, nst, ns)),
            dt,
            _weight("ssm_a"),
            bview,
            cview,
            _view(s_copy, (ns,)),
        )
        g.expand(scan)
        g.expand(_T("ssm_store", "cpy", (1,), 0, (_view(scan, (1,), contig=False), ssm_states), flags="x"))
        y = _view(scan, (d_inner, nst, ns), contig=False)
        y = _f32("ssm_y", "add", (d_inner, nst, ns), y, _f32("ssm_xd", "mul", (d_inner, nst, ns), x, _weight("ssm_d")))
        y = _f32("ssm_glu", "glu", y.ne, _f32("z_cont", "cont", z.ne, z), y)
        out = _f32("ssm_out", "mul_mat", (s.n_embd, nst, ns), _weight("ssm_out"), y)
        return _view(out, (s.n_embd, self.T))

    # ------------------------------------------------------------------ the model

    def _device(self, il: int) -> None:
        devs = self.s.layer_devices
        _T.device = devs[il] if devs else "CPU"

    def build(self) -> _Graph:
        s, T, g = self.s, self.T, self.g
        _T.device = "CPU"
        tokens = _input("inp_tokens", (T,), 4)
        rows = _f32("inp_get_rows", "get_rows", (s.n_embd, T), _weight("token_embd"), tokens)
        g.expand(rows)
        g.expand(_input("inp_embd", (s.n_embd, T), 4))
        inp = rows
        if s.family in ("gemma2", "gemma3"):
            inp = _f32("inp_scaled", "scale", inp.ne, inp)
        pos = _input("inp_pos", (T,), 4)
        s_copy = _input("rs_s_copy", (s.n_seqs,), 4)
        out_ids = _input("inp_out_ids", (self.n_out,), 4)
        n_layer = len(s.n_head)
        for il in range(n_layer):
            self._device(il)
            last = il == n_layer - 1
            cur = self.norm(inp, "attn_norm")
            if s.family == "mamba":
                cur = self.mamba(cur, s_copy)
            else:
                cur = self.attention(il, cur, pos) if s.n_head_kv[il] > 0 else self.mm("wo", cur, s.n_embd)
            res = inp
            if last:
                cur = _f32("out_rows", "get_rows", (s.n_embd, self.n_out), cur, out_ids)
                res = _f32("res_rows", "get_rows", (s.n_embd, self.n_out), inp, out_ids)
            if s.family == "mamba":
                inp = _f32("l_out", "add", cur.ne, cur, res)
                continue
            if s.family in ("gemma2", "gemma3"):
                cur = self.norm(cur, "attn_post_norm")
            ffn_inp = _f32("ffn_inp", "add", cur.ne, cur, res)
            cur = self.norm(ffn_inp, "ffn_norm")
            cur = self.ffn(cur)
            if s.family in ("gemma2", "gemma3"):
                cur = self.norm(cur, "ffn_post_norm")
            if s.family == "phi3":  # phi3 adds the residual first
                inp = _f32("l_out", "add", cur.ne, ffn_inp, cur)
            else:
                inp = _f32("l_out", "add", cur.ne, cur, ffn_inp)
        self._device(n_layer)
        cur = self.norm(inp, "result_norm")
        cur.flags = "o"
        logits = self.mm("result_output", cur, s.n_vocab)
        if s.family == "gemma2":  # final logit soft-capping (in place)
            logits = _f32("logits_scaled", "scale", logits.ne, logits)
            logits = _f32("logits_tanh", "unary", logits.ne, logits)
            logits = _f32("result_output", "scale", logits.ne, logits)
        logits.flags = "o"
        g.expand(logits)
        _T.device = "CPU"
        return g


# --------------------------------------------------------------------------- the allocator


def _align(n: int) -> int:
    return align_offset(n, _ALIGN)


class _Allocator:
    """ggml-alloc's dynamic allocator over one chunk: free blocks in address order, the last one endless."""

    def __init__(self) -> None:
        self.blocks: list[list[int]] = [[0, 1 << 62]]  # [offset, size]
        self.max_size = 0
        self.max_at = ""
        self.max_tensor = 0  # size of the tensor whose placement reached max_size

    def alloc(self, size: int, name: str) -> int:
        size = _align(size)
        best, best_size = -1, 1 << 63
        for i in range(len(self.blocks) - 1):
            b = self.blocks[i]
            if b[1] >= size and b[1] <= best_size:
                best, best_size = i, b[1]
        if best == -1:
            best = len(self.blocks) - 1
        b = self.blocks[best]
        addr = b[0]
        b[0] += size
        b[1] -= size
        if b[1] == 0:
            del self.blocks[best]
        if addr + size > self.max_size:
            self.max_size, self.max_at, self.max_tensor = addr + size, name, size
        return addr

    def free(self, addr: int, size: int) -> None:
        size = _align(size)
        blocks = self.blocks
        for i, b in enumerate(blocks):
            if b[0] + b[1] == addr:
                b[1] += size
                if i + 1 < len(blocks) and b[0] + b[1] == blocks[i + 1][0]:
                    b[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if addr + size == b[0]:
                b[0] = addr
                b[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == b[0]:
                    blocks[i - 1][1] += b[1]
                    del blocks[i]
                return
        j = 0
        while j < len(blocks) and blocks[j][0] < addr:
            j += 1
        blocks.insert(j, [addr, size])


def _assign(g: _Graph) -> None:
    """ggml-backend's scheduler passes 1, 2 and 4: where each node runs.

    An op runs where its first weight (or the cache it writes) lives; graph inputs on the CPU; the
    others take the device of their neighbours: offload devices spread down then up the graph, the
    CPU too after them; views follow their source. With everything on the CPU this changes nothing.
    """
    if all(n.dev == "CPU" for n in g.leafs) and all(n.dev == "CPU" for n in g.nodes):
        return
    dev: dict[int, str] = {}
    for node in g.nodes:
        if node.view_src is not None and "x" in node.view_src.flags:
            dev[id(node)] = node.view_src.dev
        elif node.op not in ("rope", "flash_attn_ext"):
            for src in node.src:
                if "x" in src.flags and src.op == "none":
                    dev[id(node)] = src.dev
                    break
    compute = [n for n in g.nodes if n.op != "view"]
    for gpu_only in (True, False):
        for order in (compute, compute[::-1]):
            cur = ""
            for node in order:
                d = dev.get(id(node))
                if d is not None:
                    cur = "" if gpu_only and d == "CPU" else d
                elif cur:
                    dev[id(node)] = cur
    for node in g.nodes:
        if node.op == "view":
            base = node.view_src
            node.dev = base.dev if base is not None and "x" in base.flags else dev.get(id(base), "CPU")
        else:
            node.dev = dev.get(id(node), "CPU")


def _split(g: _Graph) -> None:
    """The scheduler's splits: runs of nodes on one device, each starting with copies of what it reads from
    another device (graph inputs included).

    A copy is placed at the start of its split and freed after its last use there; the tensor it copies
    stays allocated to the end of the graph (ggml-backend keeps it alive through a view it adds).
    """
    made: dict[tuple[int, str], _T] = {}
    nodes: list[_T] = []
    pending: list[_T] = []  # the current split's nodes
    copies: list[_T] = []  # the current split's copies
    dev = ""

    def flush() -> None:
        nodes.extend(copies)
        nodes.extend(pending)
        copies.clear()
        pending.clear()

    for node in g.nodes:
        if node.view_src is None and node.dev != dev:
            flush()
            dev = node.dev
        srcs = list(node.src)
        for j, src in enumerate(srcs):
            base = src.view_src or src
            if "x" in base.flags or base.dev == node.dev or node.op == "view":
                continue
            key = (id(src), node.dev)
            if key not in made:
                cpy = _T(src.name + "_copy", "none", src.ne, 0)
                cpy.nbytes, cpy.dev = src.nbytes, node.dev
                made[key] = cpy
                copies.append(cpy)
                base.flags += "k"
            srcs[j] = made[key]
        node.src = tuple(srcs)
        pending.append(node)
    flush()
    g.nodes = nodes


def _allocate(g: _Graph) -> dict[str, _Allocator]:
    """ggml_gallocr_alloc_graph_impl over ``g``, one allocator per device: the peak of each placement."""
    allocs: dict[str, _Allocator] = {}
    addr: dict[int, int] = {}
    allocated: set[int] = set()

    def alloc_of(t: _T) -> _Allocator:
        if t.dev not in allocs:
            allocs[t.dev] = _Allocator()
        return allocs[t.dev]

    def own(t: _T) -> bool:
        return id(t) in addr

    def place(t: _T) -> None:
        if own(t) or "x" in t.flags or t.view_src is not None:
            return
        a = alloc_of(t)
        if t.op in _INPLACE:
            for p in t.src:
                if not own(p) or "o" in p.flags or (p.view_src is not None and "o" in p.view_src.flags):
                    continue
                if "k" in p.flags or (p.view_src is not None and "k" in p.view_src.flags):
                    continue  # copied to another device: the scheduler's view of it keeps it
                if p.ne != t.ne or not p.contig or p.nbytes != t.nbytes or p.dev != t.dev:
                    continue
                if p.n_children == 1 and p.n_views == 0:
                    if p.view_src is not None:
                        vs = p.view_src
                        if vs.n_views == 1 and vs.n_children == 0 and own(vs) and vs.dev == t.dev:
                            addr[id(t)] = addr[id(vs)]
                            allocated.add(id(t))
                            allocated.discard(id(vs))
                            if vs.nbytes > t.nbytes:
                                a.free(addr[id(vs)] + _align(t.nbytes), _align(vs.nbytes) - _align(t.nbytes))
                            return
                    else:
                        addr[id(t)] = addr[id(p)]
                        allocated.add(id(t))
                        allocated.discard(id(p))
                        return
        addr[id(t)] = a.alloc(t.nbytes, t.name)
        allocated.add(id(t))

    def free(t: _T) -> None:
        if "o" in t.flags or "k" in t.flags:
            return
        alloc_of(t).free(addr[id(t)], t.nbytes)
        allocated.discard(id(t))

    _assign(g)
    _split(g)
    for leaf in g.leafs:
        place(leaf)
    for node in g.nodes:
        if node.view_src is not None and node.op != "none":
            node.view_src.n_views += 1
        for src in node.src:
            src.n_children += 1
    for node in g.nodes:
        for p in node.src:
            place(p)
        place(node)
        for p in node.src:
            p.n_children -= 1
            if p.n_children == 0 and p.n_views == 0:
                if p.view_src is not None:
                    vs = p.view_src
                    vs.n_views -= 1
                    if vs.n_views == 0 and vs.n_children == 0 and id(vs) in allocated:
                        free(vs)
                elif id(p) in allocated:
                    free(p)
    return allocs


def compute_buffer(shapes: ComputeShapes) -> ComputeResult:
    """The compute buffer llama.cpp's CPU backend reserves for the graph of ``shapes`` (one ubatch)."""
    g = _Builder(shapes).build()
    allocs = _allocate(g)
    return ComputeResult(
        {d: a.max_size for d, a in allocs.items()},
        {d: a.max_at for d, a in allocs.items()},
        len(g.nodes),
        {d: a.max_tensor for d, a in allocs.items()},
    )
