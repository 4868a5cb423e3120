"""mooncake.mooncake_store_service: Mooncake's store service with a REST API
(the ``mc_store_rest_server`` command), on crescent's store.

``MooncakeStoreService(config_path=None, cli_config=None)`` reads a
MooncakeConfig (the file, or MOONCAKE_* variables; ``cli_config`` entries
override fields), ``start_store_service(max_wait_time=60,
shutdown_event=None)`` sets a store up (retrying once a second until
max_wait_time) and ``start_http_service(port=8080)`` serves, with aiohttp
(Debian's python3-aiohttp, as Mooncake's service uses):

    PUT    /api/put            {"key": str, "value": str}   -> {"status": "success"}
    GET    /api/get/{key}      the value (application/octet-stream); 404 when missing
    GET    /api/exist/{key}    {"exists": bool}
    DELETE /api/remove/{key}   {"status": "success"}
    DELETE /api/remove_all     {"status": "success removed N keys"}

Errors are JSON ``{"error": ...}`` with 400 (bad request) or 500, as
Mooncake's. Mooncake's segment-management endpoints (/api/reconfigure,
/api/mount_shm, /api/unmount_shm, /api/mount, /api/unmount,
/api/unmount_local_disk) mount memory or disks into a running client, which
crescent's store client cannot do yet: they answer 501 with an error that
says so, rather than pretending.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import time
from typing import Any, Dict, Optional

from aiohttp import web

from mooncake.mooncake_config import MooncakeConfig
from mooncake.store import MooncakeDistributedStore

__all__ = ["MooncakeStoreService", "main", "sync_main", "parse_arguments"]

_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600


def _json(status: int, body: Dict[str, Any]) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _timed_handler(operation_name: str, handler: Any) -> Any:
    async def wrapper(request: Any) -> Any:
        start = time.perf_counter()
        try:
            return await handler(request)
        finally:
            logging.info("%s operation completed in %.2f ms", operation_name,
                         (time.perf_counter() - start) * 1000)

    return wrapper


def _shm_name_to_path(name: Any) -> Optional[str]:
    """/dev/shm/<name> for a POSIX shm name ("x" or "/x"), or None."""
    if not isinstance(name, str) or not name:
        return None
    n = name[1:] if name.startswith("/") else name
    if not n or "/" in n or n in (".", ".."):
        return None
    return f"/dev/shm/{n}"


def _unblock_shutdown_signals() -> None:
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    except AttributeError:  # pragma: no cover
        pass


def _install_shutdown_signal_handlers(loop: Any, shutdown_event: asyncio.Event) -> None:
    def request_shutdown(signum: int) -> None:
        logging.info("Received signal %s, shutting down", signum)
        shutdown_event.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, request_shutdown, sig)
        except (NotImplementedError, RuntimeError):
            signal.signal(sig, lambda signum, _f: loop.call_soon_threadsafe(request_shutdown,
                                                                           signum))


_NO_MOUNT = ("crescent's store client cannot mount or unmount segments at run time yet: its "
             "segment is the global_segment_size given at setup")


class MooncakeStoreService:
    """A store client plus its REST API (see the module docstring)."""

    def __init__(self, config_path: Optional[str] = None,
                 cli_config: Optional[Dict[str, Any]] = None) -> None:
        self.store: Optional[MooncakeDistributedStore] = None
        self.config: Optional[MooncakeConfig] = None
        self.current_mode = "prefill"
        self.mounted_segment_ids: list = []
        self.last_mount_info: dict = {}
        self._state_lock = asyncio.Lock()
        self.http_port: Optional[int] = None
        self._runner: Any = None
        self._setup_logging()
        try:
            self.config = MooncakeConfig.from_file(config_path) if config_path else \
                MooncakeConfig.load_from_env()
            for key, value in (cli_config or {}).items():
                if hasattr(self.config, key):
                    setattr(self.config, key, value)
                else:
                    logging.warning("Ignoring unknown config override %r", key)
            logging.info("Mooncake configuration loaded")
        except Exception as e:
            logging.error("Configuration load failed: %s", e)
            raise

    @staticmethod
    def _setup_logging() -> None:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s - %(name)s - %(levelname)s - %(message)s")

    async def start_store_service(self, max_wait_time: float = 60,
                                  shutdown_event: Optional[asyncio.Event] = None) -> bool:
        """Set the store up, retrying once a second for max_wait_time seconds."""
        c = self.config
        start, attempt = time.perf_counter(), 0
        await asyncio.sleep(0)
        while True:
            if shutdown_event is not None and shutdown_event.is_set():
                logging.info("Store startup cancelled by shutdown request")
                return False
            elapsed = time.perf_counter() - start
            if elapsed >= max_wait_time:
                logging.error("Store startup failed: exceeded max wait time of %ss after %d "
                              "attempts", max_wait_time, attempt)
                return False
            attempt += 1
            try:
                self.store = MooncakeDistributedStore()
                ret = self.store.setup({
                    "local_hostname": c.local_hostname, "metadata_server": c.metadata_server,
                    "global_segment_size": c.global_segment_size,
                    "local_buffer_size": c.local_buffer_size, "protocol": c.protocol,
                    "rdma_devices": c.device_name or "",
                    "master_server_addr": c.master_server_address,
                    "enable_ssd_offload": c.enable_ssd_offload,
                    "ssd_offload_path": c.ssd_offload_path, "tenant_id": c.tenant_id,
                    "enable_client_http_server": c.enable_client_http_server,
                    "client_http_port": int(c.client_http_port)})
                await asyncio.sleep(0)
                if shutdown_event is not None and shutdown_event.is_set():
                    await self.stop()
                    return False
                if ret != 0:
                    raise RuntimeError(f"Store initialization failed ({ret})")
                logging.info("Store service started successfully on %s",
                             self.store.get_hostname())
                return True
            except Exception as e:  # noqa: BLE001 - retried, as Mooncake's service does
                self.store = None
                left = max_wait_time - (time.perf_counter() - start)
                pause = min(1.0, left) if left > 0 else 0
                logging.warning("Store startup failed (attempt %d): %s. Retrying in %.1fs...",
                                attempt, e, pause)
                if pause > 0:
                    if shutdown_event is not None:
                        try:
                            await asyncio.wait_for(shutdown_event.wait(), timeout=pause)
                            return False
                        except asyncio.TimeoutError:
                            pass
                    else:
                        await asyncio.sleep(pause)

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=100 * 1024 * 1024)
        routes = [("POST", "/api/reconfigure", "RECONFIGURE", self.handle_reconfigure),
                  ("POST", "/api/mount_shm", "MOUNT_SHM", self.handle_mount_shm),
                  ("POST", "/api/unmount_shm", "UNMOUNT_SHM", self.handle_unmount_shm),
                  ("POST", "/api/mount", "MOUNT", self.handle_mount),
                  ("POST", "/api/unmount", "UNMOUNT", self.handle_unmount),
                  ("POST", "/api/unmount_local_disk", "UNMOUNT_LOCAL_DISK",
                   self.handle_unmount_local_disk),
                  ("PUT", "/api/put", "PUT", self.handle_put),
                  ("GET", "/api/get/{key}", "GET", self.handle_get),
                  ("GET", "/api/exist/{key}", "EXIST", self.handle_exist),
                  ("DELETE", "/api/remove/{key}", "REMOVE", self.handle_remove),
                  ("DELETE", "/api/remove_all", "REMOVE_ALL", self.handle_remove_all)]
        app.add_routes([web.route(m, p, _timed_handler(n, h)) for m, p, n, h in routes])
        return app

    async def start_http_service(self, port: int = 8080, host: str = "0.0.0.0") -> bool:
        """Serve the REST API on host:port (port 0: any; the port is in http_port)."""
        self._runner = web.AppRunner(self.make_app())
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.http_port = sockets[0].getsockname()[1] if sockets else port
        logging.info("REST API started on port %s", self.http_port)
        return True

    # -- segment management: not available in crescent yet
    async def _no_mount(self, request: Any) -> web.Response:
        return _json(501, {"error": _NO_MOUNT})

    handle_reconfigure = _no_mount
    handle_mount_shm = _no_mount
    handle_unmount_shm = _no_mount
    handle_mount = _no_mount
    handle_unmount = _no_mount
    handle_unmount_local_disk = _no_mount

    # -- data
    async def handle_put(self, request: Any) -> web.Response:
        try:
            data = await request.json()
            key, raw = (data.get("key"), data.get("value")) if isinstance(data, dict) else \
                (None, None)
            if not key or raw is None:
                return _json(400, {"error": "Missing key or value"})
            if self.store.put(key, str(raw).encode()) != 0:
                return _json(500, {"error": "PUT operation failed"})
            return _json(200, {"status": "success"})
        except Exception as e:  # noqa: BLE001 - reported to the caller
            logging.error("PUT error: %s", e)
            return _json(500, {"error": str(e)})

    async def handle_get(self, request: Any) -> web.Response:
        try:
            key = request.match_info["key"]
            exists = self.store.is_exist(key)
            if exists == 0:
                return _json(404, {"error": "Key not found"})
            if exists < 0:
                return _json(500, {"error": "Exist check failed"})
            value = self.store.get(key)
            if value == b"":
                exists = self.store.is_exist(key)  # an empty value, or gone meanwhile?
                if exists == 0:
                    return _json(404, {"error": "Key not found"})
                if exists < 0:
                    return _json(500, {"error": "Exist check failed"})
            return web.Response(status=200, body=value, content_type="application/octet-stream")
        except Exception as e:  # noqa: BLE001
            logging.error("GET error: %s", e)
            return _json(500, {"error": str(e)})

    async def handle_exist(self, request: Any) -> web.Response:
        try:
            exists = self.store.is_exist(request.match_info["key"])
            if exists < 0:
                return _json(500, {"error": "Exist check failed"})
            return _json(200, {"exists": exists > 0})
        except Exception as e:  # noqa: BLE001
            logging.error("EXIST error: %s", e)
            return _json(500, {"error": str(e)})

    async def handle_remove(self, request: Any) -> web.Response:
        try:
            if self.store.remove(request.match_info["key"]) != 0:
                return _json(500, {"error": "Remove operation failed"})
            return _json(200, {"status": "success"})
        except Exception as e:  # noqa: BLE001
            logging.error("REMOVE error: %s", e)
            return _json(500, {"error": str(e)})

    async def handle_remove_all(self, request: Any) -> web.Response:
        try:
            ret = self.store.remove_all()
            if ret < 0:
                return _json(500, {"error": "RemoveAll operation failed"})
            return _json(200, {"status": f"success removed {ret} keys"})
        except Exception as e:  # noqa: BLE001
            logging.error("REMOVE_ALL error: %s", e)
            return _json(500, {"error": str(e)})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.store is not None:
            ret = self.store.close()
            self.store = None
            if ret != 0:
                logging.warning("Mooncake service close returned %s", ret)
            else:
                logging.info("Mooncake service stopped")


def parse_arguments(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mc_store_rest_server",
                                description="Mooncake Store Service with REST API (crescent)")
    p.add_argument("--config", type=str, help="Path to Mooncake config file", required=False)
    p.add_argument("-D", "--define", action="append", default=[],
                   help="Override configuration with key=value pairs "
                        "(e.g., -Dlocal_hostname=example.com)")
    p.add_argument("--port", type=int, default=8080, help="HTTP API port (default: 8080)")
    p.add_argument("--host", type=str, default="0.0.0.0",
                   help="HTTP API address (default: 0.0.0.0; a crescent addition)")
    p.add_argument("--max-wait-time", type=float, default=60,
                   help="Maximum total wait time in seconds (default: 60)")
    return p.parse_args(argv)


async def main(argv: Optional[list] = None) -> None:
    args = parse_arguments(argv)
    overrides = {}
    for item in args.define:
        if "=" in item:
            k, v = item.split("=", 1)
            overrides[k] = v
        else:
            logging.warning("Ignoring invalid CLI config: %s", item)
    service = MooncakeStoreService(args.config, overrides)
    shutdown = asyncio.Event()
    _install_shutdown_signal_handlers(asyncio.get_running_loop(), shutdown)
    _unblock_shutdown_signals()
    try:
        if not await service.start_store_service(max_wait_time=args.max_wait_time,
                                                 shutdown_event=shutdown):
            if shutdown.is_set():
                return
            raise RuntimeError("Failed to start store service")
        if shutdown.is_set():
            return
        await service.start_http_service(args.port, args.host)
        print(f"mc_store_rest_server listening on {args.host}:{service.http_port} "
              f"(store {service.store.get_hostname()})", flush=True)
        logging.info("Mooncake Store Service is running")
        await shutdown.wait()
    finally:
        await service.stop()


def sync_main() -> int:
    """Entry point of ``mc_store_rest_server``."""
    asyncio.run(main())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sync_main()
