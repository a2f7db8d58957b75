package presence

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A presence Lease is written by the broker, but anyone who may write
// Leases in the broker's namespace can write one too, and the restore acts
// on it: it writes the handler's webhook configurations, sweeps the scopes
// it records and releases its holds after the grace it records. So the
// broker signs the record it writes (an HMAC-SHA256 with a key only it
// holds, key.go) and restores a record as written only when the signature
// verifies.
//
// The signature covers every field of the record (signed, below), which
// is what the restore and the orphan check read. It does not cover the
// Marks: they are written apart, by merge patches, some by `broker
// release`, which runs without the key. None of them makes the broker do
// more than it would for the record alone: released makes it forget the
// handler (as deleting the Lease, which a Lease writer may also do, would:
// its holds stay), orphaned and not-restored are only shown by `broker
// status`, and release-requested and releasing make the leader release
// the handler's own holds, which `broker release --handler` does anyway,
// broker running or down, for whoever may run it.

// annSignature holds the record's signature: "v1:" and the base64 of the
// HMAC-SHA256 of canonical(lease).
const annSignature = "tether.dev/signature"

// signatureVersion prefixes the signature, for a later encoding to be told apart.
const signatureVersion = "v1:"

// signed are the annotations the signature covers, in the order the
// canonical encoding takes them: every one Put writes.
var signed = []string{
	annInstances, annAbsentSince, annGrace, annAbsentReleaseAfter, annBindings,
	annResources, annSweep, annUser, annStuck,
}

// Signature is what the broker's key says of a record.
type Signature int

const (
	// SignatureUnchecked: the store has no key (insecure mode, and `broker
	// status` or `broker release`, which run without it).
	SignatureUnchecked Signature = iota
	// SignatureNone: the Lease carries no signature (written by a broker
	// that did not sign, or with its signature removed).
	SignatureNone
	// SignatureValid: the record is as the broker wrote it.
	SignatureValid
	// SignatureMismatch: the record was changed since the broker signed
	// it, or signed with another key.
	SignatureMismatch
)

// UnsignedAcceptedFor is how long after the key was created an unsigned
// record is still restored (after the rights check of its identity): the
// first start of a broker that signs, over the Leases of one that did not.
// The broker signs every Lease it restores within seconds, so past this an
// unsigned record is one whose signature was removed, and is not restored.
const UnsignedAcceptedFor = time.Hour

// Trust is how the broker may take a record at restore.
type Trust int

const (
	// TrustRecheck: restore it if the identity it records passes the
	// rights check of a Hello for the bindings it records.
	TrustRecheck Trust = iota
	// TrustSigned: restore it as written.
	TrustSigned
	// TrustNone: do not restore it.
	TrustNone
)

// Trust says how r may be taken at now, and why not when TrustNone.
func (k *Key) Trust(r Record, now time.Time) (Trust, string) {
	switch r.Signature {
	case SignatureValid:
		return TrustSigned, ""
	case SignatureMismatch:
		return TrustNone, "its signature does not match: the lease was changed by someone other than the broker, or signed with another presence key"
	case SignatureNone:
		if k != nil && now.Sub(k.Created) >= UnsignedAcceptedFor {
			return TrustNone, fmt.Sprintf("it is unsigned, and the broker has signed the leases it writes since %s: "+
				"its signature was removed", k.Created.UTC().Format(time.RFC3339))
		}
	}
	return TrustRecheck, ""
}

// sign sets l's signature under key.
func sign(key []byte, l *coordinationv1.Lease) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[annSignature] = signatureVersion + base64.StdEncoding.EncodeToString(mac(key, l))
}

// verify says what key makes of l's signature; nil key: unchecked.
func verify(key []byte, l *coordinationv1.Lease) Signature {
	if key == nil {
		return SignatureUnchecked
	}
	v, ok := l.Annotations[annSignature]
	if !ok {
		return SignatureNone
	}
	got, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v, signatureVersion))
	if err != nil || !strings.HasPrefix(v, signatureVersion) || !hmac.Equal(got, mac(key, l)) {
		return SignatureMismatch
	}
	return SignatureValid
}

func mac(key []byte, l *coordinationv1.Lease) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(canonical(l))
	return h.Sum(nil)
}

// canonical is the encoding of what the signature covers: where the Lease
// is, the handler it names, its holder and renewal, and the signed
// annotations, each told apart from an absent one. Every value is length
// prefixed, so no two Leases encode alike. The renewal is taken to the
// microsecond, as the API server keeps it.
func canonical(l *coordinationv1.Lease) []byte {
	b := []byte(signatureVersion)
	field := func(present bool, v string) {
		if !present {
			b = append(b, 0)
			return
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	field(true, l.Namespace)
	field(true, l.Name)
	handler, ok := l.Labels[LabelHandler]
	field(ok, handler)
	field(true, deref(l.Spec.HolderIdentity)) // none and "" alike: the API server may keep either
	renewed := l.Spec.RenewTime != nil && !l.Spec.RenewTime.IsZero()
	if renewed {
		field(true, l.Spec.RenewTime.UTC().Format(metav1.RFC3339Micro))
	} else {
		field(false, "")
	}
	for _, a := range signed {
		v, ok := l.Annotations[a]
		field(ok, v)
	}
	return b
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
