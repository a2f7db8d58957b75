// The gRPC connection of one session: credentials (TLS with the broker's CA
// and a bearer token, their files read anew for every attempt, or plain text
// in insecure mode), keepalive within what the broker permits, and a bounded
// connect.

import * as grpc from "@grpc/grpc-js";
import { readFile } from "node:fs/promises";
import type { ConnectRequest, ConnectResponse } from "./gen/tether/v1/broker_pb";
import type { HandlerOptions } from "./handler";
import { CONNECT_TIMEOUT, DEFAULT_RECONNECT_MAX, DEFAULT_RECONNECT_MIN, DEFAULT_TOKEN_FILES, KEEPALIVE_TIME, KEEPALIVE_TIMEOUT, MAX_RECEIVE_BYTES } from "./limits";
import type { Target } from "./replicas";
import { brokerServiceDefinition } from "./service";
import { sdkName } from "./version";

const BrokerClient = grpc.makeGenericClientConstructor(brokerServiceDefinition, "BrokerService");

export type Connection =
  | { stream: grpc.ClientDuplexStream<ConnectRequest, ConnectResponse>; close: () => void }
  | { error: Error & { code?: number; details?: string } };

/** Opens a new connection to target and the Connect stream on it, or says why it could not. */
export async function connect(target: Target, opts: HandlerOptions, signal: AbortSignal): Promise<Connection> {
  let metadata: grpc.Metadata;
  try {
    metadata = await authorization(opts);
  } catch (err) {
    return { error: new Error(`reading the token: ${(err as Error).message}`) };
  }
  let ca: Buffer | null;
  try {
    ca = await rootCA(opts);
  } catch (err) {
    return { error: new Error(`reading the broker's CA: ${(err as Error).message}`) };
  }
  const creds = opts.insecure ? grpc.credentials.createInsecure() : grpc.credentials.createSsl(ca);
  const client = new BrokerClient(target.address, creds, {
    // A replica found by DNS is dialled by its address; TLS still verifies the name.
    ...(target.serverName ? { "grpc.ssl_target_name_override": target.serverName, "grpc.default_authority": target.serverName } : {}),
    "grpc.keepalive_time_ms": KEEPALIVE_TIME,
    "grpc.keepalive_timeout_ms": KEEPALIVE_TIMEOUT,
    "grpc.max_receive_message_length": MAX_RECEIVE_BYTES,
    "grpc.primary_user_agent": sdkName,
    "grpc.initial_reconnect_backoff_ms": opts.reconnectMin ?? DEFAULT_RECONNECT_MIN,
    "grpc.max_reconnect_backoff_ms": opts.reconnectMax ?? DEFAULT_RECONNECT_MAX,
  });
  const ready = await new Promise<Error | undefined>((resolve) => {
    const onAbort = () => resolve(new Error("handler shutting down"));
    signal.addEventListener("abort", onAbort, { once: true });
    client.waitForReady(Date.now() + CONNECT_TIMEOUT, (err) => {
      signal.removeEventListener("abort", onAbort);
      resolve(err ?? undefined);
    });
  });
  if (ready) {
    client.close();
    return { error: new Error(`connecting to ${target.address}: ${ready.message}`) };
  }
  const stream = (client as unknown as { connect(md: grpc.Metadata): grpc.ClientDuplexStream<ConnectRequest, ConnectResponse> }).connect(metadata);
  return { stream, close: () => client.close() };
}

/** The CA bundle to verify the broker with, caFile read on every attempt; null: the system roots. */
async function rootCA(opts: HandlerOptions): Promise<Buffer | null> {
  if (opts.insecure) return null;
  if (opts.caFile) return readFile(opts.caFile);
  return opts.ca ? Buffer.from(opts.ca) : null;
}

/** The first of files that exists, and what it holds. */
export async function readToken(files: string[]): Promise<[string, string]> {
  for (const [i, file] of files.entries()) {
    try {
      return [file, await readFile(file, "utf8")];
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT" || i === files.length - 1) throw err;
    }
  }
  throw new Error("no token file given");
}

/** The bearer token's metadata, read on every attempt so that a rotated token is used; none in insecure mode. */
async function authorization(opts: HandlerOptions): Promise<grpc.Metadata> {
  const md = new grpc.Metadata();
  if (opts.insecure) return md;
  let token = opts.token;
  if (!token) {
    const [file, read] = await readToken(opts.tokenFile ? [opts.tokenFile] : DEFAULT_TOKEN_FILES);
    token = read.trim();
    if (!token) throw new Error(`token file ${file} is empty`);
  }
  md.set("authorization", `Bearer ${token}`);
  return md;
}
