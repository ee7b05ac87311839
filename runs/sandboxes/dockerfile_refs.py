"""The images a Dockerfile names (FROM, COPY --from, RUN --mount from=), with the instruction and
line naming each; which are absent here, and why that fails."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import docker.errors
from docker import DockerClient

_VAR = re.compile(r"\$\{(\w+)(?::([-+])([^}]*))?\}|\$(\w+)")


def _substitute(text: str, args: dict[str, str | None]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        value = args.get(name)
        if m.group(2) == "-":
            return value if value else m.group(3)
        if m.group(2) == "+":
            return m.group(3) if value else ""
        return value if value is not None else m.group(0)

    return _VAR.sub(one, text)


def _instructions(text: str) -> list[tuple[str, str, int]]:
    """(instruction word, its arguments, the line it starts on), continuation lines joined."""
    escape = "\\"
    lines = text.splitlines()
    directive = re.match(r"#\s*escape\s*=\s*(\S)", lines[0]) if lines else None
    if directive:
        escape = directive.group(1)
    out: list[tuple[str, str, int]] = []
    current, start = "", 0
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("#") or (not line and current):
            continue
        if not current:
            start = number
        if line.endswith(escape):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip(), start))
        current = ""
    return out


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes: Docker would reject it anyway
        return text.split()


_FROM_FLAG = re.compile(r"--from=(\S+)")
_MOUNT_FROM = re.compile(r"--mount=\S*?\bfrom=([^,\s]+)")


@dataclass(frozen=True)
class ImageRef:
    """An external image a Dockerfile names, and where."""

    image: str
    instruction: str  # "FROM", "COPY --from", "ADD --from" or "RUN --mount from="
    line: int

    @property
    def where(self) -> str:
        return f"{self.instruction} (line {self.line})"


def base_image_refs(dockerfile_text: str) -> list[str]:
    """The external images a Dockerfile's FROM lines name (no stage aliases, no scratch)."""
    refs = image_refs_at(dockerfile_text)
    return list(dict.fromkeys(r.image for r in refs if r.instruction == "FROM"))


def image_refs(dockerfile_text: str) -> list[str]:
    """Every external image a Dockerfile needs, each once, in order of first use."""
    return list(dict.fromkeys(r.image for r in image_refs_at(dockerfile_text)))


def image_refs_at(dockerfile_text: str) -> list[ImageRef]:
    """Every external image a Dockerfile names, at each instruction naming it: FROM images and
    those `COPY --from=<image>` and `RUN --mount=...,from=<image>` read (stage names and numbers
    are the Dockerfile's own stages, not images)."""
    args: dict[str, str | None] = {}
    aliases: set[str] = set()
    refs: list[ImageRef] = []
    seen_from = False
    stages = 0
    for word, rest, line in _instructions(dockerfile_text):
        if seen_from and word in ("COPY", "ADD", "RUN"):
            pattern = _MOUNT_FROM if word == "RUN" else _FROM_FLAG
            what = "RUN --mount from=" if word == "RUN" else f"{word} --from"
            for m in pattern.finditer(rest):
                image = _substitute(m.group(1).strip("\"'"), args)
                own = image.lower() in aliases or (image.isdigit() and int(image) < stages)
                if image and not own:
                    refs.append(ImageRef(image, what, line))
            continue
        if word == "ARG" and not seen_from:
            for item in _split(rest):
                name, eq, default = item.partition("=")
                args[name] = _substitute(default, args) if eq else None
        elif word == "FROM":
            seen_from = True
            tokens = [t for t in rest.split() if not t.startswith("--")]
            if not tokens:
                continue
            image = _substitute(tokens[0], args)
            # Only earlier stages can be referred to by name: check before adding this alias.
            if image and image.lower() not in aliases | {"scratch"}:
                refs.append(ImageRef(image, "FROM", line))
            if len(tokens) >= 3 and tokens[1].lower() == "as":
                aliases.add(tokens[2].lower())
            stages += 1
    return refs


def missing_base_images(dockerfile_text: str, client: DockerClient) -> list[str]:
    """Images this Dockerfile needs (FROM, COPY --from) that are not present locally (and cannot
    be pulled here)."""
    return list(dict.fromkeys(r.image for r in missing_images(dockerfile_text, client)))


def missing_images(dockerfile_text: str, client: DockerClient) -> list[ImageRef]:
    """The instructions naming an image that is not present locally (nor can be pulled here),
    the first naming of each image only."""
    missing: list[ImageRef] = []
    seen: set[str] = set()
    for ref in image_refs_at(dockerfile_text):
        if ref.image in seen:
            continue
        seen.add(ref.image)
        if _absent(ref.image, client):
            missing.append(ref)
    return missing


def _absent(ref: str, client: DockerClient) -> bool:
    if "$" in ref:  # an ARG without a default: nothing local can match it
        return True
    try:
        image = client.images.get(ref)
    except docker.errors.APIError:  # ImageNotFound, or a malformed reference
        return True
    from runs.sandboxes.baseimages import untruthful

    return bool(untruthful(ref, image.labels))


def explain_missing_image(name: str, available: list[str]) -> str:
    return explain_missing_images([name], available)


def explain_missing_images(names: list[str], available: list[str]) -> str:
    """One message naming every image a build needs and cannot have, why, and the fix."""
    from runs.sandboxes.baseimages import no_stand_in_reason

    have = ", ".join(available) or "none yet (run `bench doctor --fix` to build them)"
    shown = ", ".join(names)
    one = len(names) == 1
    reasons = " ".join(r for r in map(no_stand_in_reason, names) if r)
    return (
        f"The image{'' if one else 's'} {shown} {'is' if one else 'are'} not present locally, and "
        f"no image registry is reachable on this machine, so {'it' if one else 'they'} cannot be "
        f"pulled.{' ' + reasons if reasons else ''} Locally available stand-ins: {have}. Fix: "
        f"change the Dockerfile's FROM (or COPY --from) to one of them, or build or load "
        f"{shown} on this machine yourself (`docker load -i image.tar`) and run again."
    )
