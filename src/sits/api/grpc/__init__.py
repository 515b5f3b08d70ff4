"""The gRPC front door's protocol: generated code for proto/sits/v1/chat.proto and its codecs.

chat_pb2*.py* are generated and checked in; regenerate them from the repository root with

    python -m grpc_tools.protoc -Isits/api/grpc=proto/sits/v1 --python_out=src --pyi_out=src \\
        --grpc_python_out=src proto/sits/v1/chat.proto

(tests/api/test_grpc_codegen.py fails when the checked-in files differ from that output).
"""
