{{ config(order_by='(scope, metric, window_name, rank)') }}

{#- Current listeners per song, ranked with the v1 tie policy (macros/ranking_policy.sql):
    the board the publisher copies into a snapshot (board_entries). -#}

with

current_listeners as (

    select * from {{ ref('int_listeners__current') }}

),

counts as (

    select song_id, toInt64(count()) as listeners
    from current_listeners
    group by song_id

),

ranked as (

    select
        song_id,
        listeners,
        {{ rank_items('v1', partition_by='1', score='listeners', item='song_id') }} as rank
    from counts

)

select
    'v1' as policy,
    'global' as scope,
    'listeners' as metric,
    'now' as window_name,
    toUInt32(rank) as rank,
    song_id as item_id,
    listeners as score,
    map() :: Map(LowCardinality(String), Float64) as extra
from ranked
where rank <= {{ var('board_keep_top') }}
