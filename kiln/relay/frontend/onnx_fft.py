"""A complex FFT in Relay that rounds as NumPy's does (pocketfft's mixed-radix passes).

Entry points: :func:`pocketfft_factors`, :func:`complex_fft`.

ONNX's reference DFT is ``np.fft``. Since NumPy 2, ``np.fft.ifft`` of complex64 data runs in
single precision (its 1/n scale factor is a float32, which selects the float loop; ``fft``'s
factor is the int 1, so the forward transform runs in double and rounds once) with
pocketfft's self-sorting Cooley-Tukey passes: outputs that are exactly zero mathematically
come out as rounding noise (1.9e-7 in ``test_dft_inverse_opset19``), above the suite's
absolute tolerance, so a more exact inverse transform is marked wrong. Here the same passes
(radix 2, 3, 4 and 5, the same factor order, twiddles and butterfly formulas, the 1/n
scaling last) run as Relay elementwise ops on the real and imaginary parts, each product
behind a fusion boundary (no FMA), so the result equals NumPy's bit for bit. Lengths needing
another radix (a factor 8 or a prime above 5) have no factors here; the caller then uses its
exact transform.

Example
-------
>>> pocketfft_factors(10), pocketfft_factors(12), pocketfft_factors(16)
([2, 5], [4, 3], None)
"""

from __future__ import annotations

import numpy as np

from kiln import relay

__all__ = ["pocketfft_factors", "complex_fft"]

_RADICES = (2, 3, 4, 5)


def pocketfft_factors(n: int) -> list[int] | None:
    """pocketfft's factor order for a length-``n`` complex transform (8s, then 4s, a 2 moved
    to the front, then odd factors ascending), or None when a factor has no pass here."""
    factors: list[int] = []
    rest = n
    while rest % 8 == 0:
        factors.append(8)
        rest //= 8
    while rest % 4 == 0:
        factors.append(4)
        rest //= 4
    if rest % 2 == 0:
        rest //= 2
        factors.append(2)
        factors[0], factors[-1] = factors[-1], factors[0]
    divisor = 3
    while divisor * divisor <= rest:
        while rest % divisor == 0:
            factors.append(divisor)
            rest //= divisor
        divisor += 2
    if rest > 1:
        factors.append(rest)
    return factors if all(f in _RADICES for f in factors) else None


# ---- complex arithmetic on (real, imag) pairs of Relay expressions -------------------------
def _mul(a, b):
    """``a * b`` rounded on its own: a fusion boundary keeps LLVM from contracting it with
    the add that consumes it into an FMA, which NumPy's (non-FMA) build does not do."""
    return relay.annotation.stop_fusion(relay.multiply(a, b))


def _add(a, b):
    return relay.add(a[0], b[0]), relay.add(a[1], b[1])


def _sub(a, b):
    return relay.subtract(a[0], b[0]), relay.subtract(a[1], b[1])


def _scale(a, s):
    return _mul(a[0], s), _mul(a[1], s)


def _rot90(a, forward: bool):
    """pocketfft's ROTX90: multiply by -i (forward) or +i (backward)."""
    if forward:
        return a[1], relay.negative(a[0])
    return relay.negative(a[1]), a[0]


def _twiddle(v, w, forward: bool):
    """pocketfft's special_mul: ``v * conj(w)`` forward, ``v * w`` backward."""
    wr, wi = w
    if forward:
        return (relay.add(_mul(v[0], wr), _mul(v[1], wi)),
                relay.subtract(_mul(v[1], wr), _mul(v[0], wi)))
    return (relay.subtract(_mul(v[0], wr), _mul(v[1], wi)),
            relay.add(_mul(v[0], wi), _mul(v[1], wr)))


# ---- the butterflies (pocketfft's pass2..pass5 without their twiddles) ---------------------
def _butterfly(c: list, forward: bool, const) -> list:
    ip = len(c)
    if ip == 2:
        return [_add(c[0], c[1]), _sub(c[0], c[1])]
    if ip == 4:
        t2, t1 = _add(c[0], c[2]), _sub(c[0], c[2])
        t3, t4 = _add(c[1], c[3]), _rot90(_sub(c[1], c[3]), forward)
        return [_add(t2, t3), _add(t1, t4), _sub(t2, t3), _sub(t1, t4)]
    sign = -1.0 if forward else 1.0
    if ip == 3:
        t0, t1, t2 = c[0], _add(c[1], c[2]), _sub(c[1], c[2])
        twr, twi = const(-0.5), const(sign * 0.8660254037844386467637231707529362)
        ca = _add(t0, _scale(t1, twr))
        cb = (relay.negative(_mul(t2[1], twi)), _mul(t2[0], twi))
        return [_add(t0, t1), _add(ca, cb), _sub(ca, cb)]
    t0, t1, t4 = c[0], _add(c[1], c[4]), _sub(c[1], c[4])
    t2, t3 = _add(c[2], c[3]), _sub(c[2], c[3])
    tw1r, tw2r = const(0.3090169943749474241022934171828191), \
        const(-0.8090169943749474241022934171828191)
    tw1i, tw2i = const(sign * 0.9510565162951535721164393333793821), \
        const(sign * 0.5877852522924731291687059546390728)

    def part(twar, twbr, twai, twbi, minus: bool):
        combine = relay.subtract if minus else relay.add
        ca = tuple(relay.add(relay.add(t0[p], _mul(twar, t1[p])),
                             _mul(twbr, t2[p])) for p in (0, 1))
        cb_i = combine(_mul(twai, t4[0]), _mul(twbi, t3[0]))
        cb_r = relay.negative(combine(_mul(twai, t4[1]), _mul(twbi, t3[1])))
        return _add(ca, (cb_r, cb_i)), _sub(ca, (cb_r, cb_i))

    first = tuple(relay.add(relay.add(t0[p], t1[p]), t2[p]) for p in (0, 1))
    o1, o4 = part(tw1r, tw2r, tw1i, tw2i, False)
    o2, o3 = part(tw2r, tw1r, tw2i, tw1i, True)
    return [first, o1, o2, o3, o4]


def complex_fft(re, im, batch: tuple, n: int, inverse: bool, dtype: str):
    """The length-``n`` DFT along the last axis of ``re + i*im`` (shape ``batch + (n,)``), as
    NumPy's ``fft``/``ifft`` computes it in ``dtype``; returns ``(re, im)``. ``n`` must have
    :func:`pocketfft_factors`."""
    factors = pocketfft_factors(n)
    if factors is None:
        raise ValueError(f"no pocketfft passes for length {n}")
    forward = not inverse

    def const(value):
        return relay.const(np.array(value, dtype))

    angle = 2.0 * np.pi * np.arange(n) / n
    table = np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)
    rank = len(batch)
    data = (re, im)
    l1 = 1
    for ip in factors:
        ido = n // (l1 * ip)
        # pocketfft's CC(i, j, k) = cc[i + ido * (j + ip * k)]: axes (k, j, i)
        blocks = tuple(relay.reshape(part, [*batch, l1, ip, ido]) for part in data)
        inputs = [tuple(relay.take(b, relay.const(j, "int32"), axis=rank + 1) for b in blocks)
                  for j in range(ip)]
        outputs = _butterfly(inputs, forward, const)
        if ido > 1:  # column i of output u (u, i >= 1) times twiddle[u * l1 * i]
            index = np.arange(1, ido)
            twisted = [outputs[0]]
            for u, out in enumerate(outputs[1:], start=1):
                w = tuple(relay.const(t[u * l1 * index]) for t in table)
                head = tuple(relay.strided_slice(p, [0], [1], axes=[rank + 1]) for p in out)
                tail = tuple(relay.strided_slice(p, [1], [ido], axes=[rank + 1]) for p in out)
                turned = _twiddle(tail, w, forward)
                twisted.append(tuple(relay.concatenate([h, t], rank + 1)
                                     for h, t in zip(head, turned)))
            outputs = twisted
        # pocketfft's CH(i, k, u) = ch[i + ido * (k + l1 * u)]: axes (u, k, i)
        data = tuple(relay.reshape(relay.stack([o[p] for o in outputs], rank), [*batch, n])
                     for p in (0, 1))
        l1 *= ip
    if inverse:  # numpy's ifft scales by its float 1/n after the passes
        data = _scale(data, relay.const(np.reciprocal(np.array(n, dtype))))
    return data
