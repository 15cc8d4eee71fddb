{{ config(order_by='(scoring, scope, metric, window_name, rank)') }}

{#- Every shelf ranked with the v1 tie policy under each scoring version of var `scorings`
    (macros/scoring.sql), keeping `popular_keep_top` items: more than the largest k served,
    since the API leaves out unavailable items when it reads a shelf (the catalog changes
    between publications) and the shelf must still fill. An item is on a metric's shelf when
    it has that metric in the window (a view for views, an order for orders). -#}

with

counts as (

    select
        scope,
        window_name,
        item_id,
        sumIf(score, metric = 'views') as views,
        sumIf(score, metric = 'orders') as orders
    from {{ ref('int_popular__windowed') }}
    group by scope, window_name, item_id

),

scored as (

    {%- for version in var('scorings') %}
    {%- for metric in ['views', 'orders'] %}
    select
        '{{ version }}' as scoring,
        scope,
        '{{ metric }}' as metric,
        window_name,
        item_id,
        toInt64({{ shelf_score(version, metric) }}) as score
    from counts
    where {{ metric }} > 0
    {% if not loop.last %}union all{% endif %}
    {%- endfor %}
    {% if not loop.last %}union all{% endif %}
    {%- endfor %}

),

ranked as (

    select
        scoring,
        scope,
        metric,
        window_name,
        item_id,
        score,
        {{ rank_items('v1', partition_by='scoring, scope, metric, window_name', score='score', item='item_id') }} as rank
    from scored

)

select
    'v1' as policy,
    scoring,
    scope,
    metric,
    window_name,
    toUInt32(rank) as rank,
    item_id,
    score,
    map() :: Map(LowCardinality(String), Float64) as extra
from ranked
where rank <= {{ var('popular_keep_top') }}
