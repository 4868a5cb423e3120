list(APPEND CRESCENT_SOURCES
  src/proto/frame.c
  src/proto/messages.c
)
