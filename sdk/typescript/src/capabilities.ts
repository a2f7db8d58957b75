// The protocol features this SDK has, listed in every Hello, and those the
// broker offered in its Welcome (docs/protocol.md, "Capabilities").

import { Capability } from "./gen/tether/v1/broker_pb";

/** What this SDK lists: the features it uses that need a capability. */
export const capabilities: Capability[] = [
  Capability.CAPABILITIES,
  Capability.HANDLER_EVENTS,
  Capability.RESOURCE_NAMES,
  Capability.DAEMON_EXIT_RETRY_AFTER,
  Capability.PRIORITY,
  Capability.ADMISSION,
  Capability.RESULTS_IN_STATUS,
  Capability.DAEMON_EXIT_PATCH,
  Capability.TRACE_CONTEXT,
];

/**
 * BrokerCapabilities are the features the broker offered in its last
 * Welcome, by their names without the prefix ("HANDLER_EVENTS"). listed is
 * false before the first Welcome and for a broker older than capabilities,
 * which lists none: then nothing is known to be missing.
 */
export interface BrokerCapabilities {
  listed: boolean;
  offered: string[];
}

export function brokerCapabilities(offered: Capability[]): BrokerCapabilities {
  return { listed: offered.includes(Capability.CAPABILITIES), offered: offered.map((c) => Capability[c] ?? `CAPABILITY_${c}`) };
}

/** Whether the broker is known not to have c: it lists its capabilities, and c is not among them. */
export function lacks(b: BrokerCapabilities, c: Capability): boolean {
  return b.listed && !b.offered.includes(Capability[c]);
}
