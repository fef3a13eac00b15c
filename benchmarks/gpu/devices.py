"""Which GPU the benchmark runs on, as the tuned schedules are filed: a short slug of the
device's name (schedules/tuned/<slug>/) and its architecture (the CUDA compute capability,
'sm_90'), which decides whose tuned schedules a device without its own may borrow
(cases.schedule_choice).

    slug("NVIDIA H100 80GB HBM3") == "h100"      slug("NVIDIA H200") == "h200"
    slug("NVIDIA H100 PCIe") == "h100-pcie"      slug("NVIDIA GeForce RTX 4090") == "rtx4090"

Imports nothing heavy: torch only in current(), to ask the live device.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Words of a device's name that tell no models apart: vendors and product lines, memory sizes
# and kinds, the SXM socket (the default form factor of the data-centre parts).
_NOISE = re.compile(r"nvidia|tesla|geforce|quadro|amd|instinct|\d+gb|hbm\d*e?|g?ddr\d*x?|sxm\d*|generation")
# Form factors that run the same chip at other clocks, power and memory bandwidth than the SXM part:
# kept, after a hyphen, so that their tunes are their own (they borrow the SXM part's, same architecture).
_FORM_FACTORS = ("pcie", "nvl")
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")

# The architecture of each known slug, so that a device's tuned schedules can be lent to another of the
# same architecture without either being at hand. A device missing here still finds the tuned schedules
# of those listed when it is the live device (its compute capability is asked); add it to lend its own.
ARCH = {
    # Hopper
    "h100": "sm_90", "h100-pcie": "sm_90", "h100-nvl": "sm_90", "h200": "sm_90", "h200-nvl": "sm_90",
    "gh200": "sm_90", "h800": "sm_90", "h20": "sm_90",
    # Blackwell
    "b200": "sm_100", "gb200": "sm_100", "b300": "sm_103", "gb300": "sm_103", "rtx5090": "sm_120",
    # Ada
    "l4": "sm_89", "l40": "sm_89", "l40s": "sm_89", "rtx4090": "sm_89", "rtx6000ada": "sm_89",
    # Ampere
    "a100": "sm_80", "a100-pcie": "sm_80", "a800": "sm_80", "a30": "sm_80",
    "a10": "sm_86", "a10g": "sm_86", "a40": "sm_86", "rtxa6000": "sm_86", "rtx3090": "sm_86",
    # Turing, Volta
    "t4": "sm_75", "v100": "sm_70", "v100-pcie": "sm_70",
}


def slug(name: str) -> str:
    """A short, file-name-safe name of a device, from its name as torch.cuda.get_device_name()
    spells it: lower case, the vendor, product line, memory and socket words dropped, the model's
    words run together, a PCIe or NVL form factor after a hyphen ('gpu' when nothing is left)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and not _NOISE.fullmatch(w)]
    model = "".join(w for w in words if w not in _FORM_FACTORS)
    forms = [w for w in _FORM_FACTORS if w in words]
    return "-".join([model or "gpu", *forms])


def arch(capability: tuple[int, int]) -> str:
    """(9, 0) -> 'sm_90'."""
    return f"sm_{capability[0]}{capability[1]}"


@dataclass(frozen=True)
class Device:
    """Whose tuned schedules the benchmark looks up: schedules/tuned/<slug>/ first, then those
    of the other devices of architecture `arch` (None: unknown, no other device's)."""
    slug: str
    arch: str | None = None

    @classmethod
    def named(cls, slug_: str) -> "Device":
        """A device by its slug (or its full name), its architecture from ARCH."""
        s = slug_ if SLUG.fullmatch(slug_) else slug(slug_)
        return cls(s, ARCH.get(s))


def current(override: str | None = None) -> Device:
    """The device whose tuned schedules to run: `override` (a slug such as 'h200', or a device's
    name, as --device-slug gives it) if given, else the live CUDA device, else the CPU (a dry run,
    whose rows have no tuned schedules). The architecture is ARCH's for the slug, else the live
    device's compute capability when the slug is the live device's."""
    live = None
    try:
        import torch
        if torch.cuda.is_available():
            live = Device(slug(torch.cuda.get_device_name()), arch(torch.cuda.get_device_capability()))
    except Exception:  # no torch, or a driver that cannot answer: no live device
        live = None
    if override:
        chosen = Device.named(override)
        if chosen.arch is None and live is not None and live.slug == chosen.slug:
            chosen = live
        return chosen
    return live if live is not None else Device("cpu")


def slug_arg(text: str) -> str:
    """An argparse type for --device-slug: a slug ('h200'), or a device's name, slugged."""
    return Device.named(text).slug
