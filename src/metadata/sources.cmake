list(APPEND CRESCENT_SOURCES
  src/metadata/backend.c
  src/metadata/p2p_backend.c
  src/metadata/http_backend.c
  src/metadata/http_server.c
  src/metadata/mhd_server.c
  src/metadata/kv_table.c
)
cr_unit_test(metadata_kv_table_test src/metadata/kv_table_test.c)
cr_unit_test(metadata_backend_test src/metadata/backend_test.c)
cr_unit_test(metadata_http_test src/metadata/http_test.c)
