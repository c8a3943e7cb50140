"""A benchmark config's `[arms.<name>]` tables (speculative, draft, args, env) -> ArmSpec; the check that a key
names an arm (of the kind it needs); the flags the harness sets itself, which no `args` may set."""

from __future__ import annotations

from dataclasses import dataclass

from .config_section import Section

# flags the harness sets from [model] and [server]; a config that sets them too would contradict itself
HARNESS_FLAGS = ("--model-path", "--tp-size", "--tp", "--tensor-parallel-size", "--port", "--host",
                 "--speculative-draft-model-path", "--skip-tokenizer-init", "--tokenizer-path")


@dataclass(frozen=True)
class ArmSpec:
    name: str
    speculative: bool
    args: tuple[str, ...]
    env: dict[str, str]
    draft: str | None = None  # this arm's draft model, instead of [model] draft (two drafts side by side)


def parse_arms(top: Section) -> dict[str, ArmSpec]:
    """The top level's `arms`: at least two tables, in the config's order."""
    arms_raw = top.get("arms", None, True)
    if not isinstance(arms_raw, dict) or len(arms_raw) < 2:
        raise top.error("arms", "needs at least two [arms.<name>] tables (a baseline and a speculative arm)")
    arms: dict[str, ArmSpec] = {}
    for arm_name, arm_data in arms_raw.items():
        a = Section(top.path, f"arms.{arm_name}", arm_data, {"speculative", "draft", "args", "env"})
        arms[arm_name] = ArmSpec(arm_name, a.bool_("speculative", False), a.str_list("args"), a.env("env"),
                                 a.str_("draft"))
        if arms[arm_name].draft is not None and not arms[arm_name].speculative:
            raise a.error("draft", "a draft model is for an arm with speculative = true")
        no_harness_flags(a, "args", arms[arm_name].args)
        if "," in arm_name:
            raise a.error(None, "arm names must not contain ',' (--arms takes a comma-separated list)")
    return arms


def no_harness_flags(sec: Section, key: str, args: tuple[str, ...]) -> None:
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in HARNESS_FLAGS:
            raise sec.error(key, f"{flag} is set by the harness from [model] and [server]; remove it here")


def check_arm(sec: Section, key: str, arm: str, arms: dict[str, ArmSpec], *,
              speculative: bool | None) -> None:
    if arm not in arms:
        raise sec.error(key, f"names arm {arm!r}, which has no [arms.{arm}] table (arms: {', '.join(arms)})")
    if speculative is not None and arms[arm].speculative != speculative:
        want = "speculative = true" if speculative else "speculative = false"
        raise sec.error(key, f"arm {arm!r} must have {want}")
