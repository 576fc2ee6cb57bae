package countinfo

import (
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/counts"
)

// TestEveryMetric: the table holds every Metric of package counts, and
// no more: each has names in both ecosystems, and the Metric after the
// last is one counts does not know.
func TestEveryMetric(t *testing.T) {
	all := All()
	for i, m := range all {
		if int(m) != i {
			t.Errorf("All()[%d] = %d", i, m)
		}
		info := Of(m)
		if info.Prometheus == "" || info.OpenTelemetry == "" || info.Unit == "" || info.Help == "" {
			t.Errorf("%v: incomplete Info %+v", m, info)
		}
		if strings.HasPrefix(m.String(), "Metric(") {
			t.Errorf("Metric %d is in the table but has no name in package counts", m)
		}
		if (info.Kind == Counter) != strings.HasSuffix(info.Prometheus, "_total") {
			t.Errorf("%v: kind %d, Prometheus name %q", m, info.Kind, info.Prometheus)
		}
		if (info.Label == "") != (info.Attribute == "") {
			t.Errorf("%v: label %q but attribute %q", m, info.Label, info.Attribute)
		}
	}
	if next := counts.Metric(len(all)); !strings.HasPrefix(next.String(), "Metric(") {
		t.Errorf("counts names %v, which the table lacks", next)
	}
}
