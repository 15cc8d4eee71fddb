{{ config(order_by='tuple()') }}

{#- One row: the sale's as_of and totals, all exact, from the per-product and per-buyer sums
    (every order counts in one product and one buyer), so the orders are read once per
    publication, by those two models: distinct buyers is the number of buyers with an order
    (merging every product's uniqCombined state said about the same, approximately, in 40 ms
    at 1M orders; this takes 1). -#}

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

buyers as (

    select toFloat64(sum(spend_cents)) as spend_cents, toFloat64(count()) as buyers
    from {{ ref('int_sale__buyers') }}

)

select
    as_of.as_of as as_of,
    'v1' as policy,
    ['v1'] as policies,
    map(
        'orders', totals.orders,
        'units', totals.units,
        'spend_cents', buyers.spend_cents,
        'products', totals.products,
        'distinct_buyers', buyers.buyers
    ) :: Map(LowCardinality(String), Float64) as stats
from as_of
cross join totals
cross join buyers
