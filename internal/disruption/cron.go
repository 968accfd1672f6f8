package disruption

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed cron expression: five fields (minute, hour, day of month, month, day of
// week) or one of the @ macros, read in UTC, as Karpenter reads a budget's schedule.
type Schedule struct {
	minute, hour, dom, month, dow uint64
	// domStar and dowStar record a "*" (or "?") day field: with both day fields restricted, a
	// day matching either is a match (cron's rule); otherwise both must match.
	domStar, dowStar bool
}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

var monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
var dayNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// ParseSchedule parses a cron expression; the error names the field and value it could not read.
func ParseSchedule(expr string) (*Schedule, error) {
	s := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(s)]; ok {
		s = m
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return nil, fmt.Errorf("schedule %q: want 5 fields (minute hour day-of-month month day-of-week) or a macro, got %d", expr, len(fields))
	}
	var sch Schedule
	var err error
	specs := []struct {
		name      string
		lo, hi    int
		names     map[string]int
		out       *uint64
		star      *bool
		sundayIs7 bool
	}{
		{"minute", 0, 59, nil, &sch.minute, nil, false},
		{"hour", 0, 23, nil, &sch.hour, nil, false},
		{"day of month", 1, 31, nil, &sch.dom, &sch.domStar, false},
		{"month", 1, 12, monthNames, &sch.month, nil, false},
		{"day of week", 0, 7, dayNames, &sch.dow, &sch.dowStar, true},
	}
	for i, f := range specs {
		var star bool
		*f.out, star, err = parseCronField(fields[i], f.lo, f.hi, f.names, f.sundayIs7)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %s field %q: %w", expr, f.name, fields[i], err)
		}
		if f.star != nil {
			*f.star = star
		}
	}
	return &sch, nil
}

// parseCronField reads a comma-separated list of "*", "?", values, ranges and steps into a bit
// set; star reports a field that is "*" or "?" alone.
func parseCronField(field string, lo, hi int, names map[string]int, sundayIs7 bool) (bits uint64, star bool, err error) {
	if field == "*" || field == "?" {
		star = true
	}
	for part := range strings.SplitSeq(field, ",") {
		rng, step := part, 1
		if i := strings.IndexByte(part, '/'); i >= 0 {
			rng = part[:i]
			if step, err = strconv.Atoi(part[i+1:]); err != nil || step <= 0 {
				return 0, false, fmt.Errorf("step %q is not a positive number", part[i+1:])
			}
		}
		first, last := lo, hi
		switch {
		case rng == "*" || rng == "?":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			if first, err = cronValue(a, lo, hi, names); err != nil {
				return 0, false, err
			}
			if last, err = cronValue(b, lo, hi, names); err != nil {
				return 0, false, err
			}
			if last < first {
				return 0, false, fmt.Errorf("range %q ends before it starts", rng)
			}
		default:
			if first, err = cronValue(rng, lo, hi, names); err != nil {
				return 0, false, err
			}
			if strings.Contains(part, "/") {
				last = hi
			} else {
				last = first
			}
		}
		for v := first; v <= last; v += step {
			bits |= 1 << uint(v)
		}
	}
	if sundayIs7 && bits&(1<<7) != 0 {
		bits = bits&^(1<<7) | 1
	}
	return bits, star, nil
}

func cronValue(s string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number or name", s)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d is outside %d-%d", v, lo, hi)
	}
	return v, nil
}

// Next is the first minute strictly after t (in UTC) that the schedule matches, or the zero time
// when none comes within five years (a schedule such as "0 0 30 2 *").
func (s *Schedule) Next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	limit := t.AddDate(5, 0, 0)
	for t.Before(limit) {
		switch {
		case s.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case s.hour&(1<<uint(t.Hour())) == 0:
			t = t.Truncate(time.Hour).Add(time.Hour)
		case s.minute&(1<<uint(t.Minute())) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}

func (s *Schedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<uint(t.Day())) != 0
	dow := s.dow&(1<<uint(t.Weekday())) != 0
	if s.domStar || s.dowStar {
		return dom && dow
	}
	return dom || dow
}

// ActiveWindow reports whether a window of length d opened by the schedule contains now, and
// when that window ends: windows are [hit, hit+d).
func (s *Schedule) ActiveWindow(now time.Time, d time.Duration) (bool, time.Time) {
	hit := s.Next(now.Add(-d))
	if hit.IsZero() || hit.After(now) {
		return false, time.Time{}
	}
	// Later hits inside the window extend it (an hourly schedule with a two-hour duration never
	// closes); look a bounded number of hits ahead.
	end := hit.Add(d)
	for range 1000 {
		next := s.Next(hit)
		if next.IsZero() || next.After(end) {
			return true, end
		}
		hit, end = next, next.Add(d)
	}
	return true, end
}
