# crescent-master's command line (flags.c, reads --config_path JSON with
# jansson), its metrics/admin HTTP server (admin_http.c, libmicrohttpd) and
# the Prometheus text builder (prom.c). Included from the top-level
# CMakeLists.txt; PkgConfig::JANSSON must be linked wherever
# CRESCENT_SOURCES end up (crescent_obj, crescent_static, crescent).
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
list(APPEND CRESCENT_SOURCES
  src/master/flags.c
  src/master/prom.c
  src/master/admin_http.c
)
cr_unit_test(master_flags_test src/master/flags_test.c)
cr_unit_test(master_prom_test src/master/prom_test.c)
cr_unit_test(master_admin_http_test src/master/admin_http_test.c)
