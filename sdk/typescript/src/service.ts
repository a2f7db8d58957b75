// BrokerService for @grpc/grpc-js, from the descriptor protoc-gen-es
// generated: protobuf-es writes messages and descriptors, not gRPC stubs, so
// the one method is described here, its path taken from the descriptor.

import type * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  BrokerService,
  ConnectRequestSchema,
  ConnectResponseSchema,
  type ConnectRequest,
  type ConnectResponse,
} from "./gen/tether/v1/broker_pb";

export const connectPath = `/${BrokerService.typeName}/${BrokerService.method.connect.name}`;

/** The service as grpc-js clients and servers (the test kit's broker) take it. */
export const brokerServiceDefinition = {
  connect: {
    path: connectPath,
    requestStream: true,
    responseStream: true,
    requestSerialize: (m: ConnectRequest) => Buffer.from(toBinary(ConnectRequestSchema, m)),
    requestDeserialize: (b: Buffer) => fromBinary(ConnectRequestSchema, b),
    responseSerialize: (m: ConnectResponse) => Buffer.from(toBinary(ConnectResponseSchema, m)),
    responseDeserialize: (b: Buffer) => fromBinary(ConnectResponseSchema, b),
    originalName: "Connect",
  },
} satisfies grpc.ServiceDefinition;

/** The size of req on the wire. */
export function requestBytes(req: ConnectRequest): number {
  return toBinary(ConnectRequestSchema, req).length;
}
