list(APPEND CRESCENT_SOURCES
  src/store/master_client.c
  src/store/client.c
  src/store/size.c
  src/store/staging.c
  src/store/put.c
  src/store/get.c
  src/store/replicas.c
)
