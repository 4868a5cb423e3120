list(APPEND CRESCENT_SOURCES
  src/store/master_client.c
)
