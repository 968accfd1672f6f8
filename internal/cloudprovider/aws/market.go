package aws

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"capstan.dev/capstan/internal/catalog"
)

// marketAPI is the part of EC2 the market part reads.
type marketAPI interface {
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeInstanceTypeOfferings(context.Context, *ec2.DescribeInstanceTypeOfferingsInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypeOfferingsOutput, error)
	DescribeSpotPriceHistory(context.Context, *ec2.DescribeSpotPriceHistoryInput, ...func(*ec2.Options)) (*ec2.DescribeSpotPriceHistoryOutput, error)
}

// markets is the pricing and instance-type part of the provider: it reads the region's instance
// types, the zones offering each and their on-demand and spot prices, keeps them for their TTLs,
// and paces reads after failures.
type markets struct {
	ec2     marketAPI
	pricing PricingAPI
	region  string
	clock   clock.PassiveClock
	log     logr.Logger
	opts    Options

	mu            sync.Mutex
	current       *market
	versionSeq    int
	priceFailures map[string]bool
	// refreshes runs one refresh at a time; refreshing is set while one runs.
	refreshes  singleflight.Group
	refreshing bool
	// describeBackoff and describeRetryAt pace describes after failures (refreshMarket).
	describeBackoff *wait.Backoff
	describeRetryAt time.Time
}

func newMarkets(clients *Clients, clk clock.PassiveClock, o Options) *markets {
	k := &markets{ec2: clients.EC2, pricing: clients.Pricing, region: clients.Region, clock: clk, log: o.Log, opts: o}
	k.describeBackoff = k.newDescribeBackoff()
	return k
}

// market is what EC2 says about instance types in the region: their facts, the zones offering
// each, and prices.
type market struct {
	types    []ec2types.InstanceTypeInfo
	zones    map[string]map[string]bool
	onDemand map[string]float64
	spot     map[string]map[string]float64
	// fetched and priced are when types/offerings and prices were last read.
	fetched, priced time.Time
	// version changes whenever any of it does, so built instance types know to rebuild.
	version int
}

// refreshMarket returns the market, refreshing it first when it is due: instance types and
// offerings older than the TTL, prices older than theirs. One refresh runs at a time, without
// holding the lock callers read under: while it runs, callers get the copy there is (only the
// first callers, before any copy, wait for it, sharing its answer). A failed describe with a copy
// keeps the copy and is not tried again for a back-off (30 s, doubling up to the TTL), so a
// throttled EC2 API is not asked again by every caller. A failed price refresh keeps the prices
// it has (or, before the first success, the embedded catalog's on-demand prices) and is logged
// once per failure spell.
func (k *markets) refreshMarket(ctx context.Context) (*market, error) {
	k.mu.Lock()
	m, now := k.current, k.clock.Now()
	types, prices := k.due(m, now)
	busy := k.refreshing
	k.mu.Unlock()
	if !types && !prices || busy && m != nil {
		return m, nil
	}
	v, err, _ := k.refreshes.Do("market", func() (any, error) { return k.refresh(ctx) })
	if err != nil {
		return nil, err
	}
	return v.(*market), nil
}

// refresh reads what is due of the market and stores it. Only one runs at a time (refreshes).
func (k *markets) refresh(ctx context.Context) (*market, error) {
	k.mu.Lock()
	k.refreshing = true
	m, now := k.current, k.clock.Now()
	types, _ := k.due(m, now)
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.refreshing = false
		k.mu.Unlock()
	}()
	if types {
		fresh, err := k.describeMarket(ctx)
		if err != nil {
			if m == nil {
				return nil, err
			}
			k.mu.Lock()
			wait := k.describeBackoff.Step()
			k.describeRetryAt = now.Add(wait)
			k.mu.Unlock()
			k.log.Error(err, "refreshing instance types; keeping the last answer", "retry-in", wait.String())
		} else {
			if m != nil {
				fresh.onDemand, fresh.spot, fresh.priced = m.onDemand, m.spot, m.priced
			}
			fresh.fetched = now
			k.mu.Lock()
			k.describeBackoff, k.describeRetryAt = k.newDescribeBackoff(), time.Time{}
			fresh.version = k.nextVersion()
			k.current = fresh
			k.mu.Unlock()
			m = fresh
		}
	}
	if m.onDemand == nil || now.Sub(m.priced) >= k.opts.PricingTTL {
		c := *m
		od, err := k.onDemandPrices(ctx)
		switch {
		case k.opts.IsolatedVPC:
			c.onDemand = k.fallbackPrices()
		case err == nil:
			c.onDemand = od
			k.warnOnce("on-demand", nil)
		case c.onDemand == nil:
			c.onDemand = k.fallbackPrices()
			k.warnOnce("on-demand", fmt.Errorf("%w; using the embedded catalog's us-east-1 prices until it answers", err))
		default:
			k.warnOnce("on-demand", fmt.Errorf("%w; keeping the last prices read", err))
		}
		spot, err := k.spotPrices(ctx)
		if err == nil {
			c.spot = spot
			k.warnOnce("spot", nil)
		} else {
			k.warnOnce("spot", fmt.Errorf("%w; keeping the last prices read (on-demand prices for types without one)", err))
		}
		c.priced = now
		k.mu.Lock()
		c.version = k.nextVersion()
		k.current = &c
		k.mu.Unlock()
		m = &c
	}
	return m, nil
}

// due says whether the types and offerings (older than the TTL, and no failed describe's
// back-off running) and the prices (older than theirs) should be read again. Under mu.
func (k *markets) due(m *market, now time.Time) (types, prices bool) {
	if m == nil {
		return true, true
	}
	types = now.Sub(m.fetched) >= k.opts.InstanceTypesTTL && !now.Before(k.describeRetryAt)
	return types, m.onDemand == nil || now.Sub(m.priced) >= k.opts.PricingTTL
}

// newDescribeBackoff is the waits after failed describes in a row: 30 s, doubling up to the TTL.
func (k *markets) newDescribeBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 30 * time.Second, Factor: 2, Cap: k.opts.InstanceTypesTTL, Steps: math.MaxInt32}
}

func (k *markets) nextVersion() int {
	k.versionSeq++
	return k.versionSeq
}

func (k *markets) describeMarket(ctx context.Context) (*market, error) {
	m := &market{zones: map[string]map[string]bool{}}
	pg := ec2.NewDescribeInstanceTypesPaginator(k.ec2, &ec2.DescribeInstanceTypesInput{
		Filters: []ec2types.Filter{{Name: aws.String("supported-virtualization-type"), Values: []string{"hvm"}},
			{Name: aws.String("processor-info.supported-architecture"), Values: []string{"x86_64", "arm64"}}}})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing instance types: %w", err)
		}
		m.types = append(m.types, out.InstanceTypes...)
	}
	op := ec2.NewDescribeInstanceTypeOfferingsPaginator(k.ec2, &ec2.DescribeInstanceTypeOfferingsInput{LocationType: ec2types.LocationTypeAvailabilityZone})
	for op.HasMorePages() {
		out, err := op.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describing instance type offerings: %w", err)
		}
		for _, o := range out.InstanceTypeOfferings {
			it := string(o.InstanceType)
			if m.zones[it] == nil {
				m.zones[it] = map[string]bool{}
			}
			m.zones[it][aws.ToString(o.Location)] = true
		}
	}
	return m, nil
}

// pricingFilters select Linux, shared-tenancy, on-demand compute prices without software.
func (k *markets) pricingFilters() []pricingtypes.Filter {
	f := func(field, value string) pricingtypes.Filter {
		return pricingtypes.Filter{Type: pricingtypes.FilterTypeTermMatch, Field: aws.String(field), Value: aws.String(value)}
	}
	return []pricingtypes.Filter{f("regionCode", k.region), f("operatingSystem", "Linux"), f("tenancy", "Shared"),
		f("preInstalledSw", "NA"), f("capacitystatus", "Used"), f("marketoption", "OnDemand")}
}

// priceDocument is the part of a Pricing API price list entry Capstan reads.
type priceDocument struct {
	Product struct {
		Attributes struct {
			InstanceType string `json:"instanceType"`
		} `json:"attributes"`
	} `json:"product"`
	Terms struct {
		OnDemand map[string]struct {
			PriceDimensions map[string]struct {
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
	} `json:"terms"`
}

// warnOnce logs a price source's failure when it starts failing (err) and its recovery (nil),
// not on every refresh.
func (k *markets) warnOnce(source string, err error) {
	if k.priceFailures == nil {
		k.priceFailures = map[string]bool{}
	}
	switch {
	case err != nil && !k.priceFailures[source]:
		k.log.Error(err, "reading prices", "source", source)
		k.priceFailures[source] = true
	case err == nil && k.priceFailures[source]:
		k.log.Info("reading prices again", "source", source)
		k.priceFailures[source] = false
	}
}

// onDemandPrices reads on-demand prices from the Pricing API (never in an isolated VPC).
func (k *markets) onDemandPrices(ctx context.Context) (map[string]float64, error) {
	if k.opts.IsolatedVPC {
		return nil, nil
	}
	od := map[string]float64{}
	pg := pricing.NewGetProductsPaginator(k.pricing, &pricing.GetProductsInput{ServiceCode: aws.String("AmazonEC2"),
		Filters: k.pricingFilters(), FormatVersion: aws.String("aws_v1")})
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading on-demand prices: %w", err)
		}
		for _, doc := range out.PriceList {
			var d priceDocument
			if err := json.Unmarshal([]byte(doc), &d); err != nil {
				return nil, fmt.Errorf("reading on-demand prices: decoding a price list entry: %w", err)
			}
			for _, term := range d.Terms.OnDemand {
				for _, dim := range term.PriceDimensions {
					if v, err := strconv.ParseFloat(dim.PricePerUnit["USD"], 64); err == nil && v > 0 {
						od[d.Product.Attributes.InstanceType] = v
					}
				}
			}
		}
	}
	return od, nil
}

// spotPrices reads the current spot prices from EC2's spot price history.
func (k *markets) spotPrices(ctx context.Context) (map[string]map[string]float64, error) {
	spot := map[string]map[string]float64{}
	newest := map[string]time.Time{}
	sp := ec2.NewDescribeSpotPriceHistoryPaginator(k.ec2, &ec2.DescribeSpotPriceHistoryInput{
		ProductDescriptions: []string{"Linux/UNIX", "Linux/UNIX (Amazon VPC)"}, StartTime: aws.Time(k.clock.Now())})
	for sp.HasMorePages() {
		out, err := sp.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading spot prices: %w", err)
		}
		for _, s := range out.SpotPriceHistory {
			it, zone := string(s.InstanceType), aws.ToString(s.AvailabilityZone)
			v, err := strconv.ParseFloat(aws.ToString(s.SpotPrice), 64)
			if err != nil {
				continue
			}
			key, ts := it+"/"+zone, aws.ToTime(s.Timestamp)
			if t, ok := newest[key]; ok && t.After(ts) {
				continue
			}
			newest[key] = ts
			if spot[it] == nil {
				spot[it] = map[string]float64{}
			}
			spot[it][zone] = v
		}
	}
	return spot, nil
}

// fallbackPrices are the embedded catalog's on-demand prices (us-east-1's), used when the
// Pricing API cannot be read before any success: better than no price, which would make every
// type unlaunchable.
func (k *markets) fallbackPrices() map[string]float64 {
	out := map[string]float64{}
	entries, err := catalog.Load()
	if err != nil {
		return out
	}
	for _, e := range entries {
		if v, ok := e.OnDemandPriceUSD[catalog.Region]; ok {
			out[e.Name] = v
		}
	}
	return out
}
