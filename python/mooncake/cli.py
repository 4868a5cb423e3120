"""Console commands that run crescent's servers with Mooncake's command lines.

* ``mooncake_master [flags]`` execs ``crescent-master`` with argv[0]
  ``mooncake_master``, so the process shows up as ``mooncake_master`` in
  ``ps`` / ``pgrep -f`` (TransferQueue finds a stale master that way) and
  crescent-master names itself so in its usage, version and errors (an
  installed ``mooncake_master`` symlink to crescent-master does the same
  without Python). crescent-master
  already takes Mooncake's flag names and gflags syntax (--flag=value,
  --flag value, -flag, --noflag, --config_path); this wrapper also expands
  ``--flagfile=FILE``, maps glog flags (--v, --minloglevel, --logtostderr,
  --log_dir, ...) onto CRESCENT_LOG or drops them, and drops the
  task-manager tuning flags crescent has no equivalent for
  (--max_total_*_tasks, --*_task_timeout_sec, --max_retry_attempts). Any
  other flag goes through unchanged, so unsupported features are refused by
  crescent-master with a clear message rather than ignored.
* ``mooncake_http_metadata_server [--host H] [--port P]`` execs
  ``crescent-metadata-server`` (defaults as Mooncake's: 0.0.0.0:8080).
* ``mooncake_client [flags]`` execs ``crescent-client``, the standalone
  store client (Mooncake's real client). crescent-client reads Mooncake's
  real_client flags itself (--host, --port, --master_server_address,
  --metadata_server, --protocol, --device_names, --global_segment_size,
  --local_buffer_size, --threads, --tenant_id, --enable_http_server,
  --http_port, glog's flags, --flagfile) and refuses what it cannot honour
  with exit 2, so the arguments go through unchanged.

Binaries are looked up in this order: CRESCENT_MASTER_BIN /
CRESCENT_METADATA_SERVER_BIN / CRESCENT_CLIENT_BIN (full paths), $CRESCENT_BIN_DIR/<name>,
<crescent package>/bin/<name> (pip installs put them there), the build tree
next to the package (<build>/tools/master/, <build>/tools/metadata-server/,
<build>/tools/client/),
then PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import List, Optional

MASTER = "crescent-master"
METADATA_SERVER = "crescent-metadata-server"
CLIENT = "crescent-client"

_ENV = {MASTER: "CRESCENT_MASTER_BIN", METADATA_SERVER: "CRESCENT_METADATA_SERVER_BIN",
        CLIENT: "CRESCENT_CLIENT_BIN"}
_BUILD_DIR = {MASTER: "master", METADATA_SERVER: "metadata-server", CLIENT: "client"}

# glog flags: name -> takes a value
_GLOG_FLAGS = {"v": True, "minloglevel": True, "stderrthreshold": True, "log_dir": True,
               "logbuflevel": True, "logbufsecs": True, "max_log_size": True,
               "vmodule": True, "logtostderr": False, "alsologtostderr": False,
               "colorlogtostderr": False, "stop_logging_if_full_disk": False}
# Mooncake task-manager tuning without an equivalent in crescent (all take values).
_DROPPED_FLAGS = {"max_total_finished_tasks", "max_total_pending_tasks",
                  "max_total_processing_tasks", "pending_task_timeout_sec",
                  "processing_task_timeout_sec", "max_retry_attempts"}
_GLOG_LEVELS = {"0": "info", "1": "warn", "2": "error", "3": "error"}


def find_binary(name: str) -> Optional[str]:
    """Path of a crescent executable, or None (see the module docstring)."""
    candidates = []
    env = os.environ.get(_ENV[name])
    if env:
        candidates.append(env)
    bin_dir = os.environ.get("CRESCENT_BIN_DIR")
    if bin_dir:
        candidates.append(os.path.join(bin_dir, name))
    try:
        import crescent

        pkg = os.path.dirname(os.path.abspath(crescent.__file__))
        candidates.append(os.path.join(pkg, "bin", name))
        build = os.path.dirname(os.path.dirname(pkg))  # <build>/python/crescent -> <build>
        candidates.append(os.path.join(build, "tools", _BUILD_DIR[name], name))
    except ImportError:  # pragma: no cover
        pass
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which(name)


def _flag_name(arg: str) -> Optional[str]:
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    name = arg.lstrip("-").split("=", 1)[0].replace("-", "_")
    return name


def _expand_flagfiles(args: List[str]) -> List[str]:
    out: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if _flag_name(a) == "flagfile":
            if "=" in a:
                path = a.split("=", 1)[1]
            elif i + 1 < len(args):
                i += 1
                path = args[i]
            else:
                raise SystemExit("mooncake_master: --flagfile needs a value")
            with open(path, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f]
            out.extend(_expand_flagfiles([ln for ln in lines if ln and not ln.startswith("#")]))
        else:
            out.append(a)
        i += 1
    return out


def translate_master_args(args: List[str]) -> List[str]:
    """Mooncake mooncake_master arguments -> crescent-master arguments."""
    args = _expand_flagfiles(list(args))
    out: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out.extend(args[i:])
            break
        name = _flag_name(a)
        if name is not None and (name in _GLOG_FLAGS or name in _DROPPED_FLAGS):
            takes_value = name in _DROPPED_FLAGS or _GLOG_FLAGS[name]
            value = None
            if "=" in a:
                value = a.split("=", 1)[1]
            elif takes_value and i + 1 < len(args):
                i += 1
                value = args[i]
            if name == "minloglevel" and value in _GLOG_LEVELS:
                os.environ.setdefault("CRESCENT_LOG", _GLOG_LEVELS[value])
            elif name == "v" and value and value.isdigit() and int(value) > 0:
                os.environ.setdefault("CRESCENT_LOG", "debug")
            elif name in _DROPPED_FLAGS:
                sys.stderr.write(f"mooncake_master: ignoring --{name} (no task manager in "
                                 "crescent)\n")
            i += 1
            continue
        out.append(a)
        i += 1
    return out


def _exec(name: str, args: List[str], argv0: Optional[str] = None) -> int:
    path = find_binary(name)
    if path is None:
        sys.stderr.write(f"{name} not found: set CRESCENT_BIN_DIR (or {_ENV[name]}) to "
                         "crescent's binaries\n")
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [argv0 or path] + args)
    return 127  # not reached


def master(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mooncake_master``."""
    args = sys.argv[1:] if argv is None else list(argv)
    return _exec(MASTER, translate_master_args(args), argv0="mooncake_master")


def metadata_server(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mooncake_http_metadata_server``."""
    p = argparse.ArgumentParser(prog="mooncake_http_metadata_server",
                                description="HTTP metadata server for the transfer engine "
                                            "(crescent-metadata-server)")
    p.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 = any)")
    ns = p.parse_args(sys.argv[1:] if argv is None else list(argv))
    return _exec(METADATA_SERVER, ["--host", ns.host, "--port", str(ns.port)])


def client(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``mooncake_client`` (crescent-client takes Mooncake's flags)."""
    return _exec(CLIENT, sys.argv[1:] if argv is None else list(argv))


# Mooncake's module-level name for the mooncake_master entry point.
main = master


if __name__ == "__main__":  # pragma: no cover
    sys.exit(master())
