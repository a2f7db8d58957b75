// Package relay keeps a broker Pod's admission port answering while the
// broker's process is dead.
//
// The API server calls an admission webhook through a Service, picks one
// ready endpoint for each call and never retries a call that fails. When a
// broker's process is killed (a crash, an OOM kill), its Pod's address stays
// in the Service's endpoints until the kubelet notices the container exited,
// about a second, and every call sent there in that second would be refused,
// which a fail-closed webhook turns into a refused write.
//
// A Relay runs in a container of its own in the broker's Pod, listens on
// the port the Service targets, and forwards each TCP connection, byte for
// byte, to the broker's admission listener in the same Pod; TLS stays end
// to end between the API server and a broker, and the relay never sees a
// review. When the local broker refuses the connection, the relay forwards
// it to another replica's admission listener instead (never to another
// relay, so a connection cannot go round in circles), found by Peers: in a
// cluster, the addresses of the headless Service tether-broker-replicas
// without the Pod's own (DNSPeers). Every replica serves the same
// certificate (the Secret tether-admission-tls), so a review the API server
// sends to the dead replica's address is answered by a live one.
//
// What is still lost: a connection under way to the broker when it is
// killed ends with it, and the review in flight on it with it.
package relay
