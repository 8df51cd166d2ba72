"""Bundles against a Ray cluster's nodes: whether a job's placement group could ever fit, and
how its asks read in messages (`RayExecutor.place`, `share_notice`). No Ray import."""

from __future__ import annotations

from typing import Any, Sequence


def never_fits(bundles: list[dict[str, float]], nodes: list[dict[str, Any]], names: list[str]) -> str | None:
    """Why no empty cluster of these nodes could hold the bundles; None if one could."""
    if not nodes:
        return "it has no live node"
    for name, bundle in zip(names, bundles):
        if not any(all(n["Resources"].get(k, 0.0) >= v for k, v in bundle.items()) for n in nodes):
            biggest = max(n["Resources"].get("GPU", 0.0) for n in nodes)
            return f"{name} asks for {show(bundle)} and no node has that much (most GPUs on one node: {biggest:g})"
    for key in {k for b in bundles for k in b}:
        need = sum(b.get(key, 0.0) for b in bundles)
        have = sum(n["Resources"].get(key, 0.0) for n in nodes)
        if need > have:
            if key == "memory":
                need, have, key = need / 2**30, have / 2**30, "GiB of memory"
            return f"its replicas ask for {need:.4g} {key} in all; the cluster has {have:.4g}"
    return None


def short_of(bundles: list[dict[str, float]], nodes: list[dict[str, Any]], keys: Sequence[str]) -> bool:
    """Do the bundles ask for more of one of `keys` than all the nodes have together?"""
    return any(sum(b.get(k, 0.0) for b in bundles) > sum(n["Resources"].get(k, 0.0) for n in nodes) + 1e-9
               for k in keys)


def totals(bundles: Sequence[dict[str, float]], keys: Sequence[str] | None = None) -> dict[str, float]:
    names = keys if keys is not None else list(dict.fromkeys(k for b in bundles for k in b))
    return {k: sum(b.get(k, 0.0) for b in bundles) for k in names if k in ("CPU", "memory", "GPU")}


def show(bundle: dict[str, float]) -> str:
    return ", ".join(f"{v / 2**30:.3g} GiB memory" if k == "memory" else f"{v:g} {k}" for k, v in bundle.items())
