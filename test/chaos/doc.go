// Package chaos plays random faults against the real thing and judges what
// happened afterwards, in the shape of Jepsen and of etcd's robustness
// tests: a seeded schedule, real processes, and a checker over the history.
//
// Run starts a control plane, two broker replicas with leader election and
// four instances of one handler: three on the Go SDK (./chaoshandler) and,
// where Python can run it, one on the Python SDK
// (./chaoshandler/handler.py) with the same bindings, which cover create,
// update, delete (HOLD on widgets, STRICT on ConfigMaps), timers (HOLD and
// NONE), a daemon, an event binding and a validate binding, whose webhook
// the API server calls through a front that forwards to the leading
// broker, as a Service would. A load creates, updates, deletes and
// re-creates objects under a small pool of names, as a user of its own, and a foreign
// controller puts its own finalizer on some of them and takes it off later.
// Meanwhile the seed's Plan injects faults, one after another: SIGKILL and
// SIGSTOP of handler instances, SIGKILL and SIGSTOP of the leading broker, a rollout of
// the handler to other bindings, kube-apiserver restarts (after which every
// watch must relist), etcd restarts (after which the API server's watches
// resume), etcd compactions while the API server is cut off from etcd
// (after which every watch cache and every watch must relist), and
// latency, resets and black holes on the network between each broker and
// the API server and between the handlers and each broker, through
// toxiproxy. Processes that exit by themselves (a broker that lost its
// leader Lease) are started again, as the kubelet would.
//
// Everything seen goes into a History: the load's writes, each delivery as
// the handler logged it, the faults, every state the run's own watch showed,
// the Events and the objects at the end. Check judges it against the
// contract, each check named by the rule of docs/design.md it checks;
// Summarize counts it, Report prints the table. The command is
// ./cmd/chaos; `make chaos SEED=N DURATION=D` runs it, and a failing seed
// reproduces with the same two.
package chaos
