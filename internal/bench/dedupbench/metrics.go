package dedupbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Metric names the bench reads from the debug listener. The cache counter
// is read under both the agreed name and the name the metrics package
// gives it (cairn_cache_requests_total), summed: a server exposes one.
var (
	metricCacheRequests = []string{"cairn_dedup_cache_requests_total", "cairn_cache_requests_total"}
	metricPredicted     = []string{"cairn_dedup_predicted_total"}
)

// samples maps a series ("name{k="v",...}" with labels sorted as exposed) to
// its value.
type samples map[string]float64

// get returns the value of the series of the names whose labels include
// all of labels (pairs of key, value), summed over the matching series.
func (s samples) get(names []string, labels ...string) float64 {
	var sum float64
	for series, v := range s {
		n, ls, _ := strings.Cut(series, "{")
		if !slices.Contains(names, n) {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(ls, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
				break
			}
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// sub returns s - before, series by series.
func (s samples) sub(before samples) samples {
	out := make(samples, len(s))
	for k, v := range s {
		out[k] = v - before[k]
	}
	return out
}

// scrape reads the Prometheus text exposition at url, keeping cairn's own
// series.
func scrape(ctx context.Context, client *http.Client, url string) (samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("dedupbench: scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("dedupbench: scrape metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (samples, error) {
	out := make(samples)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cairn_") {
			continue
		}
		// The value follows the series; label values may hold spaces, so
		// cut after the closing brace when there is one.
		var series, rest string
		if end := strings.LastIndexByte(line, '}'); end >= 0 {
			series, rest = line[:end+1], line[end+1:]
		} else {
			series, rest, _ = strings.Cut(line, " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("dedupbench: bad metrics line %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("dedupbench: bad metrics line %q", line)
		}
		out[series] = v
	}
	return out, sc.Err()
}

// cacheCounts are the request counts of one cache.
type cacheCounts struct {
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Predicted int64 `json:"predicted"`
}

func countsOf(s samples, cache string) cacheCounts {
	return cacheCounts{
		Hits:      int64(s.get(metricCacheRequests, "cache", cache, "result", "hit")),
		Misses:    int64(s.get(metricCacheRequests, "cache", cache, "result", "miss")),
		Predicted: int64(s.get(metricPredicted, "cache", cache)),
	}
}

// HitRatio is hits over requests, or 0 for none.
func (c cacheCounts) HitRatio() float64 {
	if c.Hits+c.Misses == 0 {
		return 0
	}
	return float64(c.Hits) / float64(c.Hits+c.Misses)
}

// predictedCounts are one cache's lookups on predicted-layer GETs: the
// layer GETs that followed a manifest GET by the same client.
type predictedCounts struct {
	Hits     int64   `json:"hits"`
	Misses   int64   `json:"misses"`
	HitRatio float64 `json:"hitRatio"`
}

// predictedOf reads the "<cache>_predicted" series of the cache counter.
func predictedOf(s samples, cache string) predictedCounts {
	c := predictedCounts{
		Hits:   int64(s.get(metricCacheRequests, "cache", cache+"_predicted", "result", "hit")),
		Misses: int64(s.get(metricCacheRequests, "cache", cache+"_predicted", "result", "miss")),
	}
	c.HitRatio = ratio(c.Hits, c.Hits+c.Misses)
	return c
}
