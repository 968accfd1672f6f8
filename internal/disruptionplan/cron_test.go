package disruptionplan_test

import (
	"strings"
	"testing"
	"time"

	"capstan.dev/capstan/internal/disruptionplan"
)

func TestScheduleNext(t *testing.T) {
	at := func(s string) time.Time {
		t, err := time.Parse("2006-01-02 15:04", s)
		if err != nil {
			panic(err)
		}
		return t
	}
	for _, tc := range []struct {
		expr, from, want string
	}{
		{"0 9 * * *", "2026-11-30 08:00", "2026-11-30 09:00"},
		{"0 9 * * *", "2026-11-30 09:00", "2026-12-01 09:00"}, // strictly after
		{"*/15 * * * *", "2026-11-30 10:07", "2026-11-30 10:15"},
		{"30 2 1 * *", "2026-11-30 10:00", "2026-12-01 02:30"},
		{"0 0 * * sun", "2026-11-30 10:00", "2026-12-06 00:00"},
		{"0 0 * * 5-6", "2026-11-30 10:00", "2026-12-04 00:00"},
		{"0 0 ? * 1", "2026-11-30 10:00", "2026-12-07 00:00"},
		{"0 12 * jan,feb *", "2026-11-30 10:00", "2027-01-01 12:00"},
		{"0 0 13 * fri", "2026-11-30 10:00", "2026-12-04 00:00"}, // both day fields: either matches
		{"@hourly", "2026-11-30 10:00", "2026-11-30 11:00"},
		{"@weekly", "2026-11-30 10:00", "2026-12-06 00:00"},
		{"@yearly", "2026-11-30 10:00", "2027-01-01 00:00"},
		{"0 0 29 2 *", "2026-11-30 10:00", "2028-02-29 00:00"},
		{"0 0 30 2 *", "2026-11-30 10:00", "0001-01-01 00:00"}, // never
	} {
		s, err := disruptionplan.ParseSchedule(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if got := s.Next(at(tc.from)); !got.Equal(at(tc.want)) {
			t.Errorf("%q after %s = %s, want %s", tc.expr, tc.from, got.Format("2006-01-02 15:04"), tc.want)
		}
	}
}

func TestScheduleErrorsNameTheField(t *testing.T) {
	for expr, want := range map[string]string{
		"61 * * * *":  `minute field "61"`,
		"* 24 * * *":  `hour field "24"`,
		"* * 0 * *":   `day of month field "0"`,
		"* * * foo *": `month field "foo"`,
		"* * * * 8":   `day of week field "8"`,
		// Sunday is 0, as Karpenter's parser (the same library) reads it; 7 is refused there too.
		"0 0 * * 7":                      `day of week field "7"`,
		"CRON_TZ=Europe/Paris 0 9 * * *": "time-zone prefix",
		"TZ=UTC":                         "time-zone prefix",
		"@every 1h":                      "@hourly",
		"@fortnightly":                   "unrecognized descriptor",
		"* * * *":                        "want 5 fields",
		"*/0 * * * *":                    "step",
		"5-1 * * * *":                    `minute field "5-1": beginning of range (5) beyond end of range (1)`,
	} {
		if _, err := disruptionplan.ParseSchedule(expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want it to contain %q", expr, err, want)
		}
	}
}

func TestActiveWindow(t *testing.T) {
	s, _ := disruptionplan.ParseSchedule("@hourly")
	now := time.Date(2026, 11, 30, 10, 30, 0, 0, time.UTC)
	// An hourly window of two hours never closes; the bounded look-ahead says when it would.
	if active, until := s.ActiveWindow(now, 2*time.Hour); !active || until.Sub(now) < 24*time.Hour {
		t.Errorf("active %v until %v; want active for a long time", active, until)
	}
	if active, until := s.ActiveWindow(now, 10*time.Minute); active {
		t.Errorf("10-minute window at :30 is active until %v", until)
	}
	if active, until := s.ActiveWindow(now, 45*time.Minute); !active || !until.Equal(time.Date(2026, 11, 30, 10, 45, 0, 0, time.UTC)) {
		t.Errorf("45-minute window: active %v until %v, want until 10:45", active, until)
	}
}
