package tetherv1

// Limits of the protocol that both ends check: the broker refuses what goes
// past them, and the SDKs say so to the handler before sending.

// MaxResultBytes bounds Ack.result. Results are stored in annotations,
// which share 256 KiB per object with every other controller's and with
// each handler's last-handled state (up to 64 KiB), so one handler's result
// must stay small.
const MaxResultBytes = 16 << 10
