package agent

import (
	"github.com/pcrunner/pcrunner/internal/provider"
	"github.com/pcrunner/pcrunner/internal/prp"
)

// sampleTurnLocked starts turnID's sandbox.metric routine (workspace.md
// §9): one sample every MetricInterval, read without the lock, committed
// only while turnID is still the active turn, and none once it settled or
// the Manager closed. It does nothing with the metrics disabled. m.mu
// held, turnID active.
func (m *Manager) sampleTurnLocked(turnID string) {
	if m.cfg.MetricInterval <= 0 || m.cfg.Sampler == nil || m.cl == nil || m.cl.ActiveTurn() != turnID {
		return
	}
	done := m.turnSettledLocked()
	root := ""
	if b := m.st.Binding; b != nil {
		root = b.Cwd
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := m.cfg.Clock.NewTicker(m.cfg.MetricInterval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C():
			case <-done:
				return
			case <-m.ctx.Done():
				return
			}
			s := m.cfg.Sampler.Sample(root)
			ev := provider.Event{EventType: prp.EventSandboxMetric, Priority: provider.P2,
				Payload: s.Payload(m.cfg.Clock.Now(), m.cfg.MetricInterval)}
			m.mu.Lock()
			active := m.cl != nil && m.cl.ActiveTurn() == turnID && m.ws.settling == ""
			if active {
				if err := m.commitThenWriteLocked([]provider.Event{ev}, nil); err != nil {
					m.log.Warn("commit sandbox metric", "err", err)
				}
			}
			m.mu.Unlock()
			if !active {
				return
			}
		}
	}()
}
