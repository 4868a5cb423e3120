list(APPEND CRESCENT_SOURCES
  src/master/mem.c
  src/master/offset_allocator.c
  src/master/service.c
  src/master/segments.c
  src/master/objects.c
  src/master/eviction.c
)
cr_unit_test(master_offset_allocator_test src/master/offset_allocator_test.c)
cr_unit_test(master_service_test src/master/service_test.c)
cr_unit_test(master_placement_test src/master/placement_test.c)
cr_unit_test(master_eviction_test src/master/eviction_test.c)
cr_unit_test(master_liveness_test src/master/liveness_test.c)
cr_unit_test(master_memory_test src/master/memory_test.c)
cr_unit_test(master_concurrency_test src/master/concurrency_test.c)
list(APPEND CRESCENT_SOURCES
  src/master/dispatch.c
  src/master/rpc_server.c
)
cr_unit_test(master_rpc_server_test src/master/rpc_server_test.c)
