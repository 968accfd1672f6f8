package disruptionplan

import (
	"testing"
	"time"
)

// FuzzParseSchedule: any text either parses or is refused with an error; a parsed schedule's next
// hit is on a whole minute after the time asked, and asking from the minute before it gives it
// again; an active window ends after it opens.
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"@daily", "0 9 * * mon-fri", "*/15 * * * *", "0 0 30 2 *", "5 4 1,15 * 7", "0-59/7 1-3 * jan,jul sun", "@hourly", "* * * * *", "60 * * * *", "1-", "*/0 * * * *"} {
		f.Add(s, int64(1767225600), int64(90))
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64, minutes int64) {
		s, err := ParseSchedule(expr)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", expr)
			}
			return
		}
		// Times between 1970 and 2100, windows up to a week.
		at := time.Unix(unix%(130*365*24*3600), 0).UTC()
		if at.Before(time.Unix(0, 0)) {
			at = at.Add(130 * 365 * 24 * time.Hour)
		}
		next := s.Next(at)
		if !next.IsZero() {
			if !next.After(at) || next.Second() != 0 || next.Nanosecond() != 0 {
				t.Fatalf("%q: Next(%s) = %s", expr, at, next)
			}
			if again := s.Next(next.Add(-time.Minute)); !again.Equal(next) {
				t.Fatalf("%q: Next(%s) = %s, but Next of the minute before it = %s", expr, at, next, again)
			}
		}
		d := time.Duration(minutes%(7*24*60)) * time.Minute
		if d < 0 {
			d = -d
		}
		if active, end := s.ActiveWindow(at, d); active && !end.After(at) {
			t.Fatalf("%q: window of %s active at %s ends at %s", expr, d, at, end)
		}
	})
}
