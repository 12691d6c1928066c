"""The stencil programs of ``stencils.py``, written as NumPy code (``np=`` another array module:
jax's, torch's), in a module of their own so that the tests compile the same programs."""

from __future__ import annotations

import numpy as np


def hdiff(in_field, coeff, np=np):
    """Horizontal diffusion (COSMO): a Laplacian, fluxes with a limiter, the update."""
    I, J = in_field.shape[0] - 4, in_field.shape[1] - 4  # noqa: E741
    lap = 4.0 * in_field[1 : I + 3, 1 : J + 3, :] - (
        in_field[2 : I + 4, 1 : J + 3, :]
        + in_field[0 : I + 2, 1 : J + 3, :]
        + in_field[1 : I + 3, 2 : J + 4, :]
        + in_field[1 : I + 3, 0 : J + 2, :]
    )
    res = lap[1:, 1 : J + 1, :] - lap[:-1, 1 : J + 1, :]
    diff = in_field[2 : I + 3, 2 : J + 2, :] - in_field[1 : I + 2, 2 : J + 2, :]
    flx = np.where(res * diff > 0, 0, res)
    res = lap[1 : I + 1, 1:, :] - lap[1 : I + 1, :-1, :]
    diff = in_field[2 : I + 2, 2 : J + 3, :] - in_field[2 : I + 2, 1 : J + 2, :]
    fly = np.where(res * diff > 0, 0, res)
    return in_field[2 : I + 2, 2 : J + 2, :] - coeff * (
        flx[1:, :, :] - flx[:-1, :, :] + fly[:, 1:, :] - fly[:, :-1, :]
    )


def biharmonic(u, np=np):
    """The Laplacian of the Laplacian (plate bending, hyperdiffusion): two 5-point stages."""
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    return lap[2:, 1:-1] + lap[:-2, 1:-1] + lap[1:-1, 2:] + lap[1:-1, :-2] - 4.0 * lap[1:-1, 1:-1]


def blur3(img, np=np):
    """Three separable box blurs in a row (x, then y, then x again)."""
    a = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / 3.0
    b = (a[:-2, :] + a[1:-1, :] + a[2:, :]) / 3.0
    return (b[:, :-2] + b[:, 1:-1] + b[:, 2:]) / 3.0


def laplace3_stage(v, np=np):
    """A 3-D 7-point stencil: each interior point against its 6 neighbours."""
    c = v[1:-1, 1:-1, 1:-1]
    return 6.0 * c - (
        v[2:, 1:-1, 1:-1] + v[:-2, 1:-1, 1:-1] + v[1:-1, 2:, 1:-1]
        + v[1:-1, :-2, 1:-1] + v[1:-1, 1:-1, 2:] + v[1:-1, 1:-1, :-2]
    )  # fmt: skip


def laplace3(u, np=np):
    """Three 7-point stages in a row (each reads the one before at 7 offsets)."""
    return laplace3_stage(laplace3_stage(laplace3_stage(u)))


def isoneutral(temp, salt, mask, zt, dxt, dyt, dzt, cost, np=np):
    """Isoneutral mixing, as ocean models' isoneutral_diffusion_pre (Griffies' triads): the
    density gradient from a nonlinear equation of state, tracer gradients on the cell faces,
    and at each face the four triads' isoneutral slopes with a tanh taper, summed into the
    mixing tensor's diagonal (K_11, K_22, K_33); the tapered slopes are its other entries."""
    nx, ny, nz = temp.shape
    rho0, alpha, beta, gam, betas = 1024.0, 1.67e-4, 1.0e-5, 1.1e-8, 7.6e-4
    k_iso, k_steep, eps, slopec, dslope = 1000.0, 50.0, 1e-20, 1e-3, 1e-3

    def w(a, sx, sy, sz):  # a around each interior point, shifted (broadcast dims whole)
        x = slice(0, 1) if a.shape[0] == 1 else slice(1 + sx, nx - 1 + sx)
        y = slice(0, 1) if a.shape[1] == 1 else slice(1 + sy, ny - 1 + sy)
        z = slice(0, 1) if a.shape[2] == 1 else slice(1 + sz, nz - 1 + sz)
        return a[x, y, z]

    t0 = temp - 10.0
    drdt = -mask * rho0 * (alpha + beta * t0 + gam * zt[None, None, :])  # d rho / d T
    drds = mask * rho0 * (betas - 2.0e-6 * t0)  # d rho / d S
    umask = mask[1:] * mask[:-1]
    vmask = mask[:, 1:] * mask[:, :-1]
    wmask = mask[:, :, 1:] * mask[:, :, :-1]
    dxu = 0.5 * (dxt[1:] + dxt[:-1])[:, None, None]
    dyu = 0.5 * (dyt[1:] + dyt[:-1])[None, :, None] * cost[None, :-1, None]
    dzw = 0.5 * (dzt[1:] + dzt[:-1])
    dtdx = umask * (temp[1:] - temp[:-1]) / dxu  # on the x faces: i + 1/2
    dsdx = umask * (salt[1:] - salt[:-1]) / dxu
    dtdy = vmask * (temp[:, 1:] - temp[:, :-1]) / dyu
    dsdy = vmask * (salt[:, 1:] - salt[:, :-1]) / dyu
    dtdz = wmask * (temp[:, :, 1:] - temp[:, :, :-1]) / dzw[None, None, :]
    dsdz = wmask * (salt[:, :, 1:] - salt[:, :, :-1]) / dzw[None, None, :]

    def slope_of(drho_along, drho_z):
        s = -drho_along / (np.where(drho_z < 0.0, drho_z, 0.0) - eps)
        return s, 0.5 * (1.0 + np.tanh((slopec - np.abs(s)) / dslope))  # the slope, its taper

    def side(gt, gs, fmask, px, py, kr):
        """A triad on a side face (x or y): cell (px, py) beside it, vertical face kr."""
        at_t, at_s = w(drdt, px, py, 0), w(drds, px, py, 0)
        along = at_t * w(gt, 0, 0, 0) + at_s * w(gs, 0, 0, 0)
        vert = at_t * w(dtdz, px, py, kr - 1) + at_s * w(dsdz, px, py, kr - 1)
        s, taper = slope_of(along, vert)
        k = dzw[kr : nz - 2 + kr] * w(fmask, 0, 0, 0)
        k = k * np.where(k_iso * taper > k_steep, k_iso * taper, k_steep)
        return k, taper * s * w(fmask, 0, 0, 0)

    def bottom(gt, gs, d, px, py, kr):
        """A triad on a bottom face: side face (px, py) beside it, cell kr above or below."""
        at_t, at_s = w(drdt, 0, 0, kr), w(drds, 0, 0, kr)
        vert = at_t * w(dtdz, 0, 0, 0) + at_s * w(dsdz, 0, 0, 0)
        along = at_t * w(gt, px, py, kr) + at_s * w(gs, px, py, kr)
        s, taper = slope_of(along, vert)
        k = w(d, px, py, 0) * k_iso * taper * s * s * w(wmask, 0, 0, 0) / (4.0 * w(d, 0, 0, 0))
        return k, taper * s * w(wmask, 0, 0, 0)

    x00, ex00 = side(dtdx, dsdx, umask, 0, 0, 0)
    x01, ex01 = side(dtdx, dsdx, umask, 0, 0, 1)
    x10, ex10 = side(dtdx, dsdx, umask, 1, 0, 0)
    x11, ex11 = side(dtdx, dsdx, umask, 1, 0, 1)
    y00, ny00 = side(dtdy, dsdy, vmask, 0, 0, 0)
    y01, ny01 = side(dtdy, dsdy, vmask, 0, 0, 1)
    y10, ny10 = side(dtdy, dsdy, vmask, 0, 1, 0)
    y11, ny11 = side(dtdy, dsdy, vmask, 0, 1, 1)
    z00, bx00 = bottom(dtdx, dsdx, dxu, -1, 0, 0)
    z01, bx01 = bottom(dtdx, dsdx, dxu, -1, 0, 1)
    z10, bx10 = bottom(dtdx, dsdx, dxu, 0, 0, 0)
    z11, bx11 = bottom(dtdx, dsdx, dxu, 0, 0, 1)
    z20, by00 = bottom(dtdy, dsdy, dyu, 0, -1, 0)
    z21, by01 = bottom(dtdy, dsdy, dyu, 0, -1, 1)
    z30, by10 = bottom(dtdy, dsdy, dyu, 0, 0, 0)
    z31, by11 = bottom(dtdy, dsdy, dyu, 0, 0, 1)
    dz = 4.0 * dzt[1 : nz - 1]
    k11 = (x00 + x01 + x10 + x11) / dz
    k22 = (y00 + y01 + y10 + y11) / dz
    k33 = z00 + z01 + z10 + z11 + z20 + z21 + z30 + z31
    return (k11, k22, k33, ex00, ex01, ex10, ex11, ny00, ny01, ny10, ny11,
            bx00, bx01, bx10, bx11, by00, by01, by10, by11)  # fmt: skip
