{{ config(order_by='tuple()') }}

{#- One row: the board's as_of and its totals. users equals the sum of every song's
    listeners, since each user counted counts for exactly one song. -#}

with

current_listeners as (

    select * from {{ ref('int_listeners__current') }}

),

as_of as (

    select as_of from {{ ref('int_listeners__as_of') }}

),

totals as (

    select toFloat64(count()) as users, toFloat64(uniqExact(song_id)) as songs
    from current_listeners

)

select
    as_of.as_of as as_of,
    'v1' as policy,
    ['v1'] as policies,
    map('users', totals.users, 'songs', totals.songs) :: Map(LowCardinality(String), Float64) as stats
from as_of
cross join totals
