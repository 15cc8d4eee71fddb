{{ config(order_by='tuple()') }}

{#- One row: the shelves' as_of (on 10 seconds), the global views and orders per window, and
    how many restaurants have a fallback shelf (built with every publication). -#}

with

as_of as (

    select as_of from {{ ref('int_popular__as_of') }}

),

totals as (

    select
        toFloat64(sumIf(score, metric = 'views' and window_name = '1h')) as views_1h,
        toFloat64(sumIf(score, metric = 'orders' and window_name = '1h')) as orders_1h,
        toFloat64(sumIf(score, metric = 'views' and window_name = '1d')) as views_1d,
        toFloat64(sumIf(score, metric = 'orders' and window_name = '1d')) as orders_1d,
        toFloat64(uniqExactIf(item_id, window_name = '1d')) as items_1d
    from {{ ref('int_popular__windowed') }}
    where scope = 'global'

)

select
    as_of.as_of as as_of,
    'v1' as policy,
    ['v1'] as policies,
    {{ var('scorings') }} :: Array(LowCardinality(String)) as scorings,
    map(
        'views_1h', totals.views_1h,
        'orders_1h', totals.orders_1h,
        'views_1d', totals.views_1d,
        'orders_1d', totals.orders_1d,
        'items_1d', totals.items_1d,
        'fallback_restaurants',
            toFloat64((select uniqExact(restaurant_id) from {{ ref('popular_fallback') }}))
    ) :: Map(LowCardinality(String), Float64) as stats
from as_of
cross join totals
