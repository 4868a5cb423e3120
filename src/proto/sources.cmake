list(APPEND CRESCENT_SOURCES
  src/proto/frame.c
  src/proto/messages.c
  src/proto/mp_scan.c
  src/proto/mp_codec.c
  src/proto/rpc.c
)
cr_unit_test(proto_frame_test src/proto/frame_test.c)
cr_unit_test(proto_messages_test src/proto/messages_test.c)
cr_unit_test(proto_rpc_test src/proto/rpc_test.c)
