list(APPEND CRESCENT_SOURCES
  src/engine/engine.c
  src/engine/config.c
  src/engine/registry.c
  src/engine/shared_alloc.c
  src/engine/ctl_page.c
  src/engine/handles.c
  src/engine/batch.c
  src/engine/segment.c
  src/engine/descriptor.c
  src/engine/control.c
  src/engine/auth.c
  src/engine/conn.c
  src/engine/worker.c
  src/engine/server.c
  src/engine/transports/local/local.c
  src/engine/transports/tcp/lane.c
)
cr_unit_test(engine_registry_test src/engine/registry_test.c)
list(APPEND CRESCENT_SOURCES
  src/engine/transports/shm/service.c
  src/engine/transports/shm/peer_map.c
  src/engine/transports/shm/shm.c
  src/engine/transports/shm/cma.c
)
