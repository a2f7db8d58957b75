// Package metrics holds the broker's Prometheus metrics behind plain
// methods, so that the rest of the broker reports what happened without
// knowing about Prometheus: a delivery answered, a hold added or released,
// a session opened, an API write made.
//
// New registers the collectors on the Registerer it is given, or on a
// private registry when given nil; never on the global default registry, so
// tests can build as many as they like. Every method is a no-op on a nil
// *Metrics, so packages work without metrics.
//
// Metrics of one subject are a group of their own, reached from Metrics:
// Admission (reviews), SignIn (access reviews, Hellos turned away), Holds
// (added, released, sampled), Presence (sessions, present, orphaned), API
// (writes, lists) and Binding (one binding's deliveries). A nil *Metrics
// gives nil groups, which record nothing either.
//
// The metrics, all labelled by handler name where one applies:
//
//	tether_deliveries_total{handler,kind,outcome}   counter
//	tether_ack_latency_seconds{handler,kind}        histogram, acked attempts only
//	tether_queue_depth{handler}                     gauge
//	tether_holds_added_total{handler}               counter
//	tether_holds_released_total{handler,reason}     counter
//	tether_sessions{handler}                        gauge
//	tether_sessions_total{handler}                  counter
//	tether_timers_scheduled{handler}                gauge
//	tether_api_writes_total{verb,resource,code}     counter
//	tether_handler_present{handler}                 gauge, 1 or 0
//	tether_leader                                   gauge, 1 on the replica that leads
//	tether_admission_review_duration_seconds{handler,binding,result}   histogram
//	tether_admission_failures_total{handler,binding,policy,reason}     counter
//	tether_access_reviews_total{result}                                counter
//	tether_hellos_throttled_total{reason}                              counter
//	tether_binding_deliveries_total{handler,binding,outcome}           counter
//	tether_binding_run_seconds{handler,binding}                        histogram
//	tether_binding_retrying{handler,binding}                           gauge
//	tether_queue_wait_seconds{handler}                                 histogram
//	tether_objects_held{handler}                                       gauge
//	tether_hold_stuck_seconds{handler}                                 gauge
//	tether_holds_stuck{handler}                                        gauge
//
// Label values are bounded: handler names, binding ids, delivery kinds, the
// outcome, release-reason, admission and write-code constants of this
// package, and resource names of bindings.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package metrics
