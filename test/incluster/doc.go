// Package incluster runs Tether as its users do, as Pods of deploy/ on the
// real one-node cluster of test/node: the broker's two replicas with leader
// election, the example handler reaching the leader through the Service over
// TLS with its ServiceAccount token, the webhook called through the Service.
// The seed's operator (testdata/gadgets, a chart with a CRD, one object of
// it and a handler whose timer holds it; the handler is ./timerhandler in
// the image tether-timer:dev, built and imported by the tests) is installed
// and uninstalled with the project's helm, and so is the broker's chart
// deploy/helm/tether. Its tests are end-to-end only; they apply, delete and
// kill with the project's kubectl and helm and the API, and judge by what
// the cluster shows.
package incluster
