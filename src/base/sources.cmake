list(APPEND CRESCENT_SOURCES
  src/base/status.c
  src/base/log.c
  src/base/net.c
)
cr_unit_test(base_status_test src/base/status_test.c)
