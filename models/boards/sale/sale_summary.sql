{{ config(order_by='tuple()') }}

{#- One row: the sale's as_of and totals. orders, units and spend are exact; buyers is the
    approximate number of distinct buyers in total (the union of every product's uniqCombined
    state). -#}

with

as_of as (

    select as_of from {{ ref('int_sale__as_of') }}

),

totals as (

    select
        toFloat64(count()) as orders,
        toFloat64(sum(toInt128(units))) as units,
        toFloat64(sum(toInt128(amount_cents))) as spend_cents,
        toFloat64(uniqExact(product_id)) as products
    from {{ ref('stg_toplist__orders') }}

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
        'spend_cents', totals.spend_cents,
        'products', totals.products,
        'distinct_buyers', buyers.buyers
    ) :: Map(LowCardinality(String), Float64) as stats
from as_of
cross join totals
cross join buyers
