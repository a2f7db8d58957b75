// Package relay keeps a broker Pod's admission port answering while the
// broker's process is dead.
//
// The API server calls an admission webhook through a Service, picks one
// ready endpoint for each call and never retries a call that fails. When a
// broker's process is killed (a crash, an OOM kill), its Pod's address stays
// in the Service's endpoints until the kubelet notices the container exited,
// about a second, and every call sent there in that second would be refused,
// and every review under way on the killed process's connections lost,
// which a fail-closed webhook turns into refused writes.
//
// A Relay runs in a container of its own in the broker's Pod and listens on
// the port the Service targets. Once it has the admission serving
// certificate every replica serves (CertSource; in a cluster the Secret
// tether-admission-tls the broker writes, SecretSource, read again every
// 30 s for a rotation), it serves HTTPS with it itself (HTTP/1.1 and h2):
// it reads each request whole (bounded as the broker bounds a review) and
// sends it to the broker's admission listener in the same Pod, verifying
// the broker's certificate with the Secret's CA. When no answer came from
// the broker (the connection refused, reset or ended before an answer, a
// TLS or dial failure), it sends the request again to another replica's
// admission listener (never to another relay, so a request cannot go round
// in circles), found by Peers: in a cluster, the addresses of the headless
// Service tether-broker-replicas without the Pod's own (DNSPeers). A review
// writes nothing on the broker's side, so sending it again is safe; an
// answer, whatever its status, is passed back and never sent again.
//
// Until it has the certificate (at the first install, before the broker
// wrote the Secret) the relay forwards each TCP connection byte for byte
// to the local broker, or, when that refuses, to another replica; TLS stays
// end to end then, and a review under way on a connection to a broker that
// is killed is lost with it.
//
// What is still lost: a review whose broker died after it began to answer
// (a response cut short is not resent), and the calls to the Pod while the
// relay itself is dead.
package relay
