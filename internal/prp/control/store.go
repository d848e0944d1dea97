package control

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pcrunner/pcrunner/internal/prp"
)

// Bootstrap ticket TTL bounds (CP issueBootstrapTicket).
const (
	minTicketTTL = time.Second
	maxTicketTTL = 60 * time.Second
)

// Lease store errors.
var (
	errLeaseUnknown = errors.New("connection lease unknown, expired or revoked")
	// errLeaseRenewMismatch: lease_renew stated an epoch or expiry the core
	// does not hold; the core closes the connection (spec §5).
	errLeaseRenewMismatch = errors.New("lease renewal does not match the held lease")
)

// MemoryCredentialStore is an in-memory CredentialStore for the core half
// (tests and prpctl). It keeps auth keys, never tokens, once issued. Safe
// for concurrent use.
type MemoryCredentialStore struct {
	// Rand supplies ticket and lease tokens; nil means crypto/rand.
	Rand io.Reader

	// mu guards tickets and leases and the records in them; helpers that
	// need it held end in Locked.
	mu      sync.Mutex
	tickets map[string]*ticketRecord // by credential id
	leases  map[string]*leaseRecord  // by credential id
}

type ticketRecord struct {
	authKey         [32]byte
	expiresAtUnixMs int64
	used            bool
}

type leaseRecord struct {
	authKey [32]byte
	lease   prp.Lease // Token always empty
	revoked bool
}

// NewMemoryCredentialStore returns an empty store.
func NewMemoryCredentialStore() *MemoryCredentialStore {
	return &MemoryCredentialStore{tickets: map[string]*ticketRecord{}, leases: map[string]*leaseRecord{}}
}

func (m *MemoryCredentialStore) rand() io.Reader {
	if m.Rand != nil {
		return m.Rand
	}
	return rand.Reader
}

// IssueTicket creates a one-use bootstrap ticket ("bootstrap_<uuid>") valid
// for ttl (1–60 s) from now and returns the token. The store keeps only its
// auth key.
func (m *MemoryCredentialStore) IssueTicket(ttl time.Duration, now time.Time) (string, error) {
	if ttl < minTicketTTL || ttl > maxTicketTTL {
		return "", fmt.Errorf("issue ticket: ttl %s outside %s–%s", ttl, minTicketTTL, maxTicketTTL)
	}
	id, err := randomUUID(m.rand())
	if err != nil {
		return "", fmt.Errorf("issue ticket: %w", err)
	}
	token := "bootstrap_" + id
	m.AddTicket(token, now.Add(ttl))
	return token, nil
}

// AddTicket registers a given bootstrap token (tests with fixed tokens).
func (m *MemoryCredentialStore) AddTicket(token string, expiresAt time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tickets[prp.CredentialID(token)] = &ticketRecord{authKey: prp.AuthKey(token), expiresAtUnixMs: expiresAt.UnixMilli()}
}

// AddLease registers lease l under its Token, replacing any lease with the
// same id (whose token then stops authenticating), as AddTicket registers a
// given bootstrap token: for a caller that stands in for the runner holding
// the lease. The store keeps the token's auth key, not the token.
func (m *MemoryCredentialStore) AddLease(l prp.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, r := range m.leases {
		if r.lease.ID == l.ID {
			delete(m.leases, id)
		}
	}
	token := l.Token
	l.Token = ""
	m.leases[prp.CredentialID(token)] = &leaseRecord{authKey: prp.AuthKey(token), lease: l}
}

// TicketUsed reports whether the ticket was consumed (tests).
func (m *MemoryCredentialStore) TicketUsed(token string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tickets[prp.CredentialID(token)]
	return t != nil && t.used
}

// Lookup implements CredentialStore.
func (m *MemoryCredentialStore) Lookup(credentialID string, now time.Time) (Credential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms := now.UnixMilli()
	if t := m.tickets[credentialID]; t != nil && !t.used && t.expiresAtUnixMs > ms {
		return Credential{ID: credentialID, Kind: prp.CredentialBootstrap, AuthKey: t.authKey, ExpiresAtUnixMs: t.expiresAtUnixMs}, nil
	}
	if l := m.leases[credentialID]; l != nil && !l.revoked && l.lease.ExpiresAtUnixMs > ms {
		return Credential{
			ID: credentialID, Kind: prp.CredentialLease, AuthKey: l.authKey, ExpiresAtUnixMs: l.lease.ExpiresAtUnixMs,
			LeaseID: l.lease.ID, RevocationEpoch: l.lease.RevocationEpoch, ProtocolVersion: l.lease.ProtocolVersion,
		}, nil
	}
	return Credential{}, errCredentialRejected
}

// Admit implements CredentialStore: the ticket is consumed and the lease
// created under one lock, so two proofs cannot both spend one ticket.
func (m *MemoryCredentialStore) Admit(cred Credential, version int, ttl time.Duration, now time.Time) (prp.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms := now.UnixMilli()
	switch cred.Kind {
	case prp.CredentialBootstrap:
		t := m.tickets[cred.ID]
		if t == nil || t.used || t.expiresAtUnixMs <= ms || t.authKey != cred.AuthKey {
			return prp.Lease{}, errCredentialRejected
		}
		leaseUUID, err := randomUUID(m.rand())
		if err != nil {
			return prp.Lease{}, err
		}
		tokenUUID, err := randomUUID(m.rand())
		if err != nil {
			return prp.Lease{}, err
		}
		t.used = true
		token := "lease_" + tokenUUID
		l := prp.Lease{
			ID: "connection_lease_" + leaseUUID, ExpiresAtUnixMs: ms + ttl.Milliseconds(),
			ProtocolVersion: version, RenewalVersion: leaseRenewalVersion,
		}
		m.leases[prp.CredentialID(token)] = &leaseRecord{authKey: prp.AuthKey(token), lease: l}
		l.Token = token
		return l, nil
	case prp.CredentialLease:
		r := m.leases[cred.ID]
		if r == nil || r.revoked || r.lease.ExpiresAtUnixMs <= ms || r.authKey != cred.AuthKey ||
			r.lease.ExpiresAtUnixMs != cred.ExpiresAtUnixMs || r.lease.RevocationEpoch != cred.RevocationEpoch {
			return prp.Lease{}, errCredentialRejected
		}
		return r.lease, nil
	}
	return prp.Lease{}, errCredentialRejected
}

// byLeaseIDLocked finds a lease record by lease id; m.mu held.
func (m *MemoryCredentialStore) byLeaseIDLocked(leaseID string) *leaseRecord {
	for _, r := range m.leases {
		if r.lease.ID == leaseID {
			return r
		}
	}
	return nil
}

// LeaseState returns the lease (without token) and whether it is usable at
// now: known, unrevoked and unexpired. The core checks this before every
// frame (spec §5, scenario 27).
func (m *MemoryCredentialStore) LeaseState(leaseID string, now time.Time) (prp.Lease, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byLeaseIDLocked(leaseID)
	if r == nil {
		return prp.Lease{}, false
	}
	return r.lease, !r.revoked && r.lease.ExpiresAtUnixMs > now.UnixMilli()
}

// Revoked reports whether the lease is known and revoked (expired or
// not).
func (m *MemoryCredentialStore) Revoked(leaseID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byLeaseIDLocked(leaseID)
	return r != nil && r.revoked
}

// renewLease applies a lease_renew as CP #renewLease does: the stated epoch
// must match and the stated expiry must be > 0 and ≤ the recorded one. A
// stated expiry equal to the recorded one extends it to max(recorded,
// now+ttl); an older one (a retry after a lost reply) changes nothing. It
// returns the payload of the lease_renewed reply.
func (m *MemoryCredentialStore) renewLease(leaseID string, req prp.LeaseRenewPayload, ttl time.Duration, now time.Time) (prp.LeaseRenewedPayload, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byLeaseIDLocked(leaseID)
	ms := now.UnixMilli()
	if r == nil || r.revoked || r.lease.ExpiresAtUnixMs <= ms {
		return prp.LeaseRenewedPayload{}, errLeaseUnknown
	}
	stated := req.ConnectionLeaseExpiresAtUnixMs
	if req.ConnectionLeaseRevocationEpoch != r.lease.RevocationEpoch || stated <= 0 || stated > r.lease.ExpiresAtUnixMs {
		return prp.LeaseRenewedPayload{}, errLeaseRenewMismatch
	}
	if stated == r.lease.ExpiresAtUnixMs {
		r.lease.ExpiresAtUnixMs = max(r.lease.ExpiresAtUnixMs, ms+ttl.Milliseconds())
	}
	return prp.LeaseRenewedPayload{
		PreviousExpiresAtUnixMs:        stated,
		ConnectionLeaseExpiresAtUnixMs: r.lease.ExpiresAtUnixMs,
		ConnectionLeaseRevocationEpoch: r.lease.RevocationEpoch,
	}, nil
}

// Revoke marks the lease revoked at a new epoch, which must exceed the
// current one; it returns the revoke payload to send.
func (m *MemoryCredentialStore) Revoke(leaseID string, epoch int64) (prp.RevokePayload, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.byLeaseIDLocked(leaseID)
	if r == nil {
		return prp.RevokePayload{}, errLeaseUnknown
	}
	if epoch <= r.lease.RevocationEpoch {
		return prp.RevokePayload{}, prp.ErrRevokeEpoch
	}
	r.lease.RevocationEpoch, r.revoked = epoch, true
	return prp.RevokePayload{RevocationEpoch: epoch}, nil
}
