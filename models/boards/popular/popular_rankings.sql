{{ config(order_by='(scope, metric, window_name, rank)') }}

{#- Every shelf ranked with the v1 tie policy, keeping `popular_keep_top` items: more than
    the largest k served, since the API leaves out unavailable items when it reads a shelf
    (the catalog changes between publications) and the shelf must still fill. -#}

with

ranked as (

    select
        scope,
        metric,
        window_name,
        item_id,
        score,
        {{ rank_items('v1', partition_by='scope, metric, window_name', score='score', item='item_id') }} as rank
    from {{ ref('int_popular__windowed') }}

)

select
    'v1' as policy,
    scope,
    metric,
    window_name,
    toUInt32(rank) as rank,
    item_id,
    score,
    map() :: Map(LowCardinality(String), Float64) as extra
from ranked
where rank <= {{ var('popular_keep_top') }}
