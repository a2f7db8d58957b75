// Package incluster runs Tether as its users do, as Pods of deploy/ on the
// real one-node cluster of test/node: the broker's two replicas with leader
// election, the example handler reaching the leader through the Service over
// TLS with its ServiceAccount token, the webhook called through the Service.
// Its tests are end-to-end only; they apply, delete and kill with the
// project's kubectl and the API, and judge by what the cluster shows.
package incluster
