{{ config(order_by='tuple()') }}

{#- One row: the sale's as_of and totals. orders, units and spend are exact, summed from the
    per-product and per-buyer sums (every order counts in one product and one buyer), so the
    orders are read once per publication, by those two models; buyers is the approximate
    number of distinct buyers in total (the union of every product's uniqCombined state). -#}

with

as_of as (

    select as_of from {{ ref('int_sale__as_of') }}

),

totals as (

    select
        toFloat64(sum(orders)) as orders,
        toFloat64(sum(units)) as units,
        toFloat64(count()) as products
    from {{ ref('int_sale__products') }}

),

spend as (

    select toFloat64(sum(spend_cents)) as spend_cents
    from {{ ref('int_sale__buyers') }}

),

buyers as (

    select toFloat64(uniqCombinedMerge(buyers)) as buyers
    from {{ ref('stg_toplist__sale_buyers') }}

)

select
    as_of.as_of as as_of,
    'v1' as policy,
    ['v1'] as policies,
    map(
        'orders', totals.orders,
        'units', totals.units,
        'spend_cents', spend.spend_cents,
        'products', totals.products,
        'distinct_buyers', buyers.buyers
    ) :: Map(LowCardinality(String), Float64) as stats
from as_of
cross join totals
cross join spend
cross join buyers
