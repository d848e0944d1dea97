package clock

import (
	"testing"
	"testing/synctest"
	"time"
)

// System follows simulated time inside a synctest bubble, which is what lets
// the runner's, agent's and link's timers run simulated hours in tests.
func TestSystemFollowsSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Or(nil)
		start := c.Now()
		tm := c.NewTimer(time.Hour)
		tk := c.NewTicker(time.Minute)
		fired := make(chan struct{})
		c.AfterFunc(2*time.Hour, func() { close(fired) })
		ticks := 0
		for ticks < 59 {
			<-tk.C()
			ticks++
		}
		<-tm.C()
		if got := c.Now().Sub(start); got != time.Hour {
			t.Fatalf("timer fired after %v, want 1h", got)
		}
		tk.Stop()
		<-fired
		if got := c.Now().Sub(start); got != 2*time.Hour {
			t.Fatalf("AfterFunc ran after %v, want 2h", got)
		}
		if tm.Reset(time.Second) {
			t.Fatal("Reset of a fired timer reported it active")
		}
		if !tm.Stop() {
			t.Fatal("Stop of a reset timer reported it inactive")
		}
	})
}
