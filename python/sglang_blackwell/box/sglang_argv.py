"""What `python -m sglang.launch_server` makes of its command line, for the flags `serve` plans around (the TP
size, flags the user set). Read from sglang 0.5.9, 0.5.14 and 0.5.23 (server_args.py prepare_server_args and
add_cli_args, server_args_config_parser.py), not guessed:

- `--config FILE` (the exact token, once): ConfigArgumentMerger reads the YAML file and sglang parses
  <the file's arguments> + <the arguments before --config> + <those after FILE>, so the command line wins over the
  file. The file must end in .yaml or .yml and hold a mapping (empty: nothing); each key becomes `--<key>` as
  written; true -> the flag (false -> nothing) for a store_true option, a list -> the flag and each item, a mapping
  -> its JSON, anything else -> str(value). `--config=FILE` (one token) is parsed but never merged: sglang
  ignores the file; serve refuses it instead of planning for settings sglang will not read.
- argparse: the last occurrence of a flag wins; a long flag may be abbreviated to an unambiguous prefix
  (allow_abbrev); `--flag=value` or `--flag value`, where the value may be a negative number but no other token
  starting with `-`; after a bare `--` nothing is a flag.
- the TP size: --tp-size and --tensor-parallel-size (0.5.9: one action with both names; 0.5.14, 0.5.23: --tp-size
  with the alias --tensor-parallel-size), type int, default 1. No other flag of these versions starts with --tp
  or --te, so --tp, --tp-s, --te, --tensor ... are abbreviations of them.
sglang itself accepts --tp 0 or -3 and fails later; serve refuses a TP size < 1 or above limits.MAX_TP up front.
- who can reach the server: --host (default 127.0.0.1), --api-key, --admin-api-key (type str, the last one wins;
  abbreviations from --ho, --ap, --ad: no other flag of these versions starts so), for box/exposure.py.
- the attention backend the user chose: --attention-backend, --prefill-attention-backend,
  --decode-attention-backend (default None each; abbreviations from --attention-b, --prefill-a, --decode-a:
  --attention-context-parallel-size, --attention-data-parallel-size, --prefill-delayer-..., --decode-log-interval
  share the shorter prefixes), and whether speculation is on: --speculative-algorithm (default None; from
  --speculative-al: --speculative-accept-threshold-..., --speculative-adaptive, --speculative-attention-mode share
  --speculative-a), for box/attention_backend.py.
The YAML file is input from outside: read whole only up to CONFIG_MAX_BYTES, and its data walked (aliases
expanded) only up to CONFIG_MAX_DEPTH levels and CONFIG_MAX_VALUES values, so a billion-laughs file or a deeply
nested one is one line naming it, never a hang or a RecursionError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..limits import tp_problem

TP_FLAGS = ("--tp-size", "--tensor-parallel-size")
# who can reach the server (box/exposure.py): flag -> the shortest abbreviation argparse takes for it (no other
# flag of 0.5.9, 0.5.14, 0.5.23 starts with --ho, --ap or --ad)
ACCESS_FLAGS = {"--host": "--ho", "--api-key": "--ap", "--admin-api-key": "--ad"}
# the attention backend per phase, and the speculative algorithm (box/attention_backend.py): flag -> the shortest
# abbreviation argparse takes for it in all three lines
ATTENTION_FLAGS = {"--attention-backend": "--attention-b", "--prefill-attention-backend": "--prefill-a",
                   "--decode-attention-backend": "--decode-a"}
SPECULATIVE_FLAGS = {"--speculative-algorithm": "--speculative-al"}
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's: such a token is a value, not a flag
YAML_SUFFIXES = (".yaml", ".yml")
CONFIG_MAX_BYTES = 1 << 20  # a server's option file: 1 MiB is thousands of options
CONFIG_MAX_DEPTH = 32  # sglang's options are scalars, lists and JSON objects of a few levels
CONFIG_MAX_VALUES = 100_000  # every value of the file, aliases expanded (a billion-laughs file has 10^9)


@dataclass
class SglangArgv:
    tokens: list[str]  # what sglang's argparse parses (the --config file merged in front)
    tp: int
    tp_settings: list[str] = field(default_factory=list)  # every TP setting, in the order sglang reads them
    config: str | None = None
    host: str | None = None  # the --host sglang keeps (None: its default)
    host_setting: str | None = None  # where that came from, as the user wrote it
    api_key_set: bool = False  # a non-empty --api-key
    admin_api_key_set: bool = False  # a non-empty --admin-api-key
    attention_settings: list[str] = field(default_factory=list)  # each attention-backend flag, as written
    speculative: str | None = None  # the --speculative-algorithm sglang keeps (None: no speculation)

    def tp_why(self) -> str:
        if not self.tp_settings:
            return "TP=1 (no --tp: sglang's default)"
        last = self.tp_settings[-1]
        if len(self.tp_settings) == 1:
            return f"TP={self.tp} ({last})"
        return (f"TP={self.tp} ({last}: sglang keeps the last of {', '.join(self.tp_settings)}"
                + (", the config file's first" if self.config else "") + ")")


def tp_flag(token: str) -> str | None:
    """The TP flag a token spells for argparse (exactly, or as an unambiguous abbreviation)."""
    if not token.startswith("--") or token == "--":
        return None
    name = token.split("=", 1)[0]
    if name in TP_FLAGS:
        return name
    hits = [f for f in TP_FLAGS if f.startswith(name)]
    return hits[0] if len(name) >= 4 and len(hits) == 1 else None


def spelled_flag(token: str, flags: dict[str, str]) -> str | None:
    """The flag of `flags` (flag -> its shortest unambiguous abbreviation) a token spells for argparse, exactly
    or abbreviated."""
    if not token.startswith("--") or token == "--":
        return None
    name = token.split("=", 1)[0]
    return next((f for f, shortest in flags.items() if f.startswith(name) and name.startswith(shortest)), None)


def access_flag(token: str) -> str | None:
    """The host / key flag a token spells for argparse (exactly, or as an unambiguous abbreviation)."""
    return spelled_flag(token, ACCESS_FLAGS)


def mask_keys(argv: list[str]) -> list[str]:
    """argv with the values of --api-key and --admin-api-key (and their abbreviations) replaced by ***."""
    out, hide_next = [], False
    for tok in argv:
        flag = access_flag(tok)
        if hide_next:
            out.append("***")
            hide_next = False
        elif flag in ("--api-key", "--admin-api-key"):
            if "=" in tok:
                out.append(tok.split("=", 1)[0] + "=***")
            else:
                out.append(tok)
                hide_next = True
        else:
            out.append(tok)
    return out


def _flag_value(tokens: list[tuple[str, str]], i: int, what: str) -> tuple[str, str, int]:
    """The value of the flag at tokens[i] (`--flag=value`, or `--flag value`): (value, as written, the index of
    its last token)."""
    tok, where = tokens[i]
    if "=" in tok:
        return tok.split("=", 1)[1], tok, i
    if i + 1 < len(tokens) and not _is_flag(tokens[i + 1][0]):
        return tokens[i + 1][0], f"{tok} {tokens[i + 1][0]}", i + 1
    raise UserError(f"{where or tok}: expected {what} after {tok}")


def _is_flag(token: str) -> bool:
    return token.startswith("-") and token != "-" and not NEGATIVE_NUMBER.match(token)


def read(args: list[str]) -> SglangArgv:
    """The arguments as sglang reads them; UserError (naming the flag, or the config file and key) for what sglang
    would refuse or silently ignore, and for a TP size < 1."""
    for a in args:
        if a == "--":
            break
        if a.startswith("--config="):
            raise UserError(f"{a}: sglang merges a config file only as two words (--config "
                            f"{a.split('=', 1)[1]}); with '=' it ignores the file")
    config = None
    tokens: list[tuple[str, str | None]] = [(a, None) for a in args]  # (token, where it came from)
    positions = [i for i, a in enumerate(args) if a == "--config"]
    if len(positions) > 1:
        raise UserError("--config given twice: sglang reads one config file")
    if positions:
        i = positions[0]
        if i + 1 >= len(args):
            raise UserError("--config: expected a YAML file after it")
        config = args[i + 1]
        tokens = _config_tokens(config) + tokens[:i] + tokens[i + 2:]
    settings: list[str] = []
    tp = 1
    access: dict[str, tuple[str, str]] = {}  # flag -> (value, as written), the last one wins
    attention: list[str] = []
    speculative: str | None = None
    i = 0
    while i < len(tokens):
        tok, where = tokens[i]
        if tok == "--":
            break
        if access_flag(tok):
            value, shown, i = _flag_value(tokens, i, "a value")
            access[access_flag(tok)] = (value, shown + (f" in {config}" if where else ""))
        elif spelled_flag(tok, ATTENTION_FLAGS):
            _, shown, i = _flag_value(tokens, i, "an attention backend")
            attention.append(shown + (f" in {config}" if where else ""))
        elif spelled_flag(tok, SPECULATIVE_FLAGS):
            speculative, _, i = _flag_value(tokens, i, "a speculative algorithm")
        flag = tp_flag(tok)
        if flag:
            value, shown, i = _flag_value(tokens, i, "the tensor-parallel size")
            try:
                tp = int(value)
            except ValueError:  # not an integer, or one of more digits than Python converts
                tp = 0
            if tp < 1:
                raise UserError(f"{where or shown}: expected a positive integer (the tensor-parallel size), "
                                f"got {_short(value)}")
            if (why := tp_problem(tp)) is not None:
                raise UserError(f"{where or shown}: {why} (limits.MAX_TP), got {_short(value)}")
            settings.append(shown + (f" in {config}" if where else ""))
        i += 1
    host = access.get("--host")
    return SglangArgv(tokens=[t for t, _ in tokens], tp=tp, tp_settings=settings, config=config,
                      host=host[0] if host else None, host_setting=host[1] if host else None,
                      api_key_set=bool(access.get("--api-key", ("", ""))[0]),
                      admin_api_key_set=bool(access.get("--admin-api-key", ("", ""))[0]),
                      attention_settings=attention, speculative=speculative or None)


def _config_tokens(path_text: str) -> list[tuple[str, str | None]]:
    """The arguments sglang's ConfigArgumentMerger makes of the YAML file, each with `--config FILE: key`."""
    path = Path(path_text)
    at = f"--config {path_text}"
    if path.suffix.lower() not in YAML_SUFFIXES:
        raise UserError(f"{at}: sglang reads only .yaml / .yml config files")
    if not path.is_file():
        raise UserError(f"{at}: " + ("not a file" if path.exists() else "no such file"))
    try:
        import yaml
    except ImportError:
        raise UserError(f"{at}: reading sglang's YAML config needs PyYAML (sglang's environment has it; "
                        "pip install pyyaml)") from None
    try:
        with open(path, "rb") as f:
            raw = f.read(CONFIG_MAX_BYTES + 1)
        if len(raw) > CONFIG_MAX_BYTES:
            raise UserError(f"{at}: larger than {CONFIG_MAX_BYTES} bytes: not a server's option file")
        data = yaml.safe_load(raw.decode("utf-8"))
    except RecursionError:
        raise UserError(f"{at}: nested too deeply to be a server's option file") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{at}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise UserError(f"{at}: cannot read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        raise UserError(f"{at}: not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        return []
    _check_size(data, at)
    if not isinstance(data, dict):
        raise UserError(f"{at}: expected a mapping of option: value at the top, got {type(data).__name__}")
    out: list[tuple[str, str | None]] = []
    for key, value in data.items():
        if not isinstance(key, str):
            raise UserError(f"{at}: key {key!r} is not a string (sglang reads option names)")
        where = f"{at}: {key}"
        if tp_flag(f"--{key}") and isinstance(value, bool | list | dict):
            raise UserError(f"{where}: expected a positive integer (the tensor-parallel size), got {value!r}")
        out += [(t, where) for t in _yaml_arg(key, value)]
    return out


def _short(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:24]}...({len(value)} characters)"


def _check_size(data: Any, at: str) -> None:
    """The YAML data walked as sglang walks it (aliases expanded: json.dumps of a mapping, str of a list): more
    than CONFIG_MAX_DEPTH levels or CONFIG_MAX_VALUES values is refused before anything expands it."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        v, depth = stack.pop()
        count += 1
        if count > CONFIG_MAX_VALUES:
            raise UserError(f"{at}: more than {CONFIG_MAX_VALUES} values once its aliases are expanded (an alias "
                            "bomb?): not a server's option file")
        if isinstance(v, dict | list):
            if depth > CONFIG_MAX_DEPTH:
                raise UserError(f"{at}: nested deeper than {CONFIG_MAX_DEPTH} levels: not a server's option file")
            items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else v
            stack += [(x, depth + 1) for x in items]


def _yaml_arg(key: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [f"--{key}"] if value else []
    if isinstance(value, list):
        return [f"--{key}", *(str(v) for v in value)] if value else []
    if isinstance(value, dict):
        return [f"--{key}", json.dumps(value)]
    return [f"--{key}", str(value)]
